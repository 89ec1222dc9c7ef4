"""Page weight on a mid-range phone: what a first visit downloads, when it first paints, and that
what was made lighter still works (diagrams drawn, maths typeset, notebooks styled).

The test server does not compress, so the bytes are counted as a static host would send them:
text responses gzip-compressed, images and fonts as they are.
"""
import gzip
import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlparse

import pytest
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
PHONE = "Galaxy A55"                           # a mid-range Android phone (Playwright's device list)
NETWORK = {"offline": False, "latency": 40,  # ms; ~20 Mbit/s down, 5 up, in bytes per second
           "downloadThroughput": 20e6 / 8, "uploadThroughput": 5e6 / 8}
CPU_SLOWDOWN = 4
BUDGET_BYTES, BUDGET_FCP_MS = 1_000_000, 1500
TEXT = re.compile(r"text/|javascript|json|xml|svg")
SECTIONS = ("distributed", "moe", "inference", "kernels", "agents")


def phone(browser) -> dict:
    """Playwright's descriptor of the emulated phone, without the engine name new_context refuses."""
    return {k: v for k, v in browser.devices[PHONE].items() if k != "default_browser_type"}


def question_pages(site: Path, has: str | None = None, lacks: str | None = None) -> list[str]:
    """Chinese question pages (URL paths) whose content has / lacks an element of the given class."""
    found = []
    for html in sorted(p for s in SECTIONS for p in (site / s).glob("*/index.html")):
        text = html.read_text()
        if (has is None or f'class="{has}"' in text) and (lacks is None or f'class="{lacks}"' not in text):
            found.append(html.parent.relative_to(site).as_posix() + "/")
    return found




def visit(browser, url: str, throttle: bool = False):
    """Open url in a fresh context (empty cache) as the phone; return the page and its responses."""
    ctx = browser.new_context(**phone(browser), locale="zh-CN")
    page = ctx.new_page()
    host, responses, outside = urlparse(url).netloc, [], []
    page.on("response", lambda r: responses.append(r))
    page.on("request", lambda r: urlparse(r.url).scheme in ("http", "https") and urlparse(r.url).netloc != host
            and outside.append(r.url))
    if throttle:
        cdp = ctx.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.emulateNetworkConditions", NETWORK)
        cdp.send("Emulation.setCPUThrottlingRate", {"rate": CPU_SLOWDOWN})
    page.goto(url, wait_until="networkidle")
    assert outside == [], f"requests left the site: {outside[:5]}"
    return page, responses


def served_bytes(responses) -> dict[str, int]:
    sizes = {}
    for r in responses:
        if r.status >= 300 or urlparse(r.url).scheme not in ("http", "https"):
            continue
        body = r.body()
        text = TEXT.search(r.headers.get("content-type", ""))
        sizes[r.url] = len(gzip.compress(body, 6)) if text else len(body)
    return sizes


@pytest.mark.browser
def test_a_question_page_without_diagrams_is_light_and_paints_fast(browser, site_url, built_site):
    pages = question_pages(built_site, lacks="mermaid")
    assert pages, "no question page without a diagram to measure"
    page, responses = visit(browser, site_url + pages[0], throttle=True)
    sizes = served_bytes(responses)
    total = sum(sizes.values())
    fcp = page.evaluate("performance.getEntriesByName('first-contentful-paint')[0]?.startTime")
    page.context.close()
    biggest = ", ".join(f"{urlparse(u).path.rsplit('/', 1)[-1] or u} {n // 1000} kB"
                        for u, n in sorted(sizes.items(), key=lambda kv: -kv[1])[:6])
    assert not any("mermaid" in u for u in sizes), "a page without a diagram loaded Mermaid"
    seen = f"{pages[0]}: {total / 1e6:.2f} MB compressed, first contentful paint at {fcp} ms; largest: {biggest}"
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "page-weight.txt").write_text(seen + "\n")
    assert total < BUDGET_BYTES, seen
    assert fcp is not None and fcp < BUDGET_FCP_MS, seen


@pytest.mark.browser
def test_a_page_with_a_diagram_still_draws_it_offline(browser, site_url, built_site):
    pages = question_pages(built_site, has="mermaid")
    assert pages, "no question page with a diagram"
    page, responses = visit(browser, site_url + pages[0])
    page.wait_for_selector("div.mermaid", timeout=15000)  # Material swaps each pre.mermaid for its drawing
    box = page.locator("div.mermaid").first.bounding_box()
    assert box and box["height"] > 50, "the mermaid diagram was not drawn"
    assert page.locator("pre.mermaid").count() == 0
    assert any(r.url.endswith("/assets/vendor/mermaid.min.js") for r in responses)
    page.context.close()


@pytest.mark.browser
def test_a_page_with_maths_still_typesets_it(browser, site_url, built_site):
    pages = question_pages(built_site, has="arithmatex")
    assert pages, "no question page with maths"
    page, responses = visit(browser, site_url + pages[0])
    page.wait_for_function("() => document.querySelectorAll('.arithmatex mjx-container').length"
                           " === document.querySelectorAll('.arithmatex').length", timeout=15000)
    width = page.locator(".arithmatex mjx-container").first.evaluate("e => e.getBoundingClientRect().width")
    assert width > 5, "MathJax produced an empty formula"
    assert page.locator("mjx-merror").count() == 0, "MathJax reported a TeX error"
    fonts = [r for r in responses if r.url.endswith(".woff")]
    assert fonts and all(r.ok for r in fonts), "MathJax's fonts did not load from the site"
    page.context.close()


@pytest.mark.browser
def test_a_page_without_maths_loads_no_mathjax(browser, site_url, built_site):
    pages = question_pages(built_site, lacks="arithmatex")
    assert pages, "no question page without maths"
    page, responses = visit(browser, site_url + pages[0])
    assert not any("mathjax" in r.url for r in responses)
    page.context.close()


@pytest.mark.browser
def test_notebook_pages_share_one_stylesheet(browser, site_url, built_site):
    sheets = list((built_site / "assets/stylesheets").glob("jupyter.*.css"))
    assert len(sheets) == 1, sheets
    for html in sorted(built_site.glob("labs/*/index.html")) + sorted(built_site.glob("en/labs/*/index.html")):
        text = html.read_text()
        if "<title>Redirecting...</title>" in text:
            continue  # labs/03-paged-kv-cache/, a moved page's redirect
        assert f"assets/stylesheets/{sheets[0].name}" in text, f"{html} does not link the notebook stylesheet"
        inline = sum(len(m) for m in re.findall(r"<style[^>]*>.*?</style>", text, re.S))
        assert inline < 20_000, f"{html} still inlines {inline} bytes of CSS"
    page, _ = visit(browser, site_url + "labs/00-gpu-ceilings/")
    styled = page.evaluate("getComputedStyle(document.querySelector('.jupyter-wrapper'))"
                           ".getPropertyValue('--jp-cell-editor-background')")
    assert styled.strip(), "the notebook stylesheet did not apply"
    page.context.close()


def test_content_images_load_lazily(built_site):
    eager = []
    for html in built_site.rglob("*.html"):
        main = html.read_text().partition('<article class="md-content__inner')[2].partition("</article>")[0]
        eager += [f"{html.relative_to(built_site)}: {m[:80]}" for m in re.findall(r"<img\b[^>]*>", main)
                  if 'loading="lazy"' not in m and 'src="data:' not in m]  # inlined images are already here
    assert not eager, eager[:5]


# The hooks on their own, with stand-in pages.

def load(name: str):
    spec = importlib.util.spec_from_file_location(f"hook_{name}", ROOT / "hooks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def stand_in(src_uri: str, content: str = "", url: str = "x/"):
    return SimpleNamespace(file=SimpleNamespace(src_uri=src_uri), content=content, url=url)


def test_page_scripts_keep_mermaid_and_mathjax_only_where_used():
    hook = load("page_scripts")
    out = ('<head></head><body><script src="../../assets/javascripts/bundle.js"></script>\n'
           '<script src="../../javascripts/mathjax-config.js"></script>\n'
           '<script src="../../assets/vendor/mathjax/tex-chtml.js"></script>\n'
           '<script src="../../assets/vendor/mermaid.min.js"></script>\n</body>')
    plain = hook.on_post_page(out, stand_in("a.md", "<p>text about mermaid and arithmatex</p>"), None)
    assert "mermaid.min.js" not in plain and "mathjax" not in plain and "bundle.js" in plain
    both = hook.on_post_page(out, stand_in("a.md", '<pre class="mermaid"><code>graph LR</code></pre>'
                                                   '<span class="arithmatex">\\(x\\)</span>'), None)
    assert both == out
    with pytest.raises(PluginError, match="navigation.instant"):
        hook.on_config(SimpleNamespace(theme={"features": ["navigation.instant"]}, extra_javascript=[]))


def test_notebook_css_moves_the_stylesheets_out_and_keeps_output_styles():
    hook = load("notebook_css")
    html = ('<script>copy()</script><style type="text/css">.a{color:red}</style>\n<style>.b{}</style>'
            '<div class="jupyter-wrapper"><style scoped>.df{}</style><p>cell</p></div> <!-- jupyter-wrapper -->'
            "\n<style>\n['pre { line-height: 125%; }']\n</style>")
    page = stand_in("labs/x.ipynb", url="labs/x/")
    body = hook.on_page_content(html, page, None, None)
    assert "<style scoped>.df{}</style>" in body and body.count("<style") == 1 and "<script>copy()</script>" in body
    assert hook._sheets[page.kb_notebook_css] == ".a{color:red}\n.b{}"
    head = hook.on_post_page("<head></head>", page, None)
    assert f'<link rel="stylesheet" href="../../{page.kb_notebook_css}">\n</head>' in head
    assert hook.on_page_content("<p>x</p>", stand_in("a.md"), None, None) == "<p>x</p>"


def test_lazy_images_and_focusable_notebook_cells():
    lazy = load("lazy_images").on_page_content(
        '<img src="a.png"><img loading="eager" src="b.png"><img src="data:image/png;base64,AA">', None, None, None)
    assert lazy == ('<img loading="lazy" src="a.png"><img loading="eager" src="b.png">'
                    '<img src="data:image/png;base64,AA">')
    focus = load("notebook_focus").on_page_content('<div class="highlight-ipynb hl-python"><pre>x</pre></div>',
                                                    stand_in("labs/x.ipynb"), None, None)
    assert focus.startswith('<div tabindex="0" class="highlight-ipynb hl-python">')
