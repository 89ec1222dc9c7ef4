"""Reading the site: lab pages that keep their columns and titles, numbers whose source opens by tap or
keyboard, a question header that leads to practice, the study path, and the language switch.

Checks the session's built site (conftest's built_site) and, where behaviour matters, drives it in
Chromium with test_browser's fixtures (a phone viewport where it counts)."""
import re
import subprocess
from html import unescape
from pathlib import Path

import pytest

from kb.history import last_change
from kb.lab_html import DEFAULT_ALT
from kb.labs import colab_url, lab_meta
from kb.pages import split_front_matter
from test_browser import SHOTS, page  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parents[1]
STEMS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
LAB_PAGES = [f"{pre}labs/{stem}/index.html" for pre in ("", "en/") for stem in STEMS]
QUESTIONS = sorted(p.relative_to(ROOT / "docs").with_suffix("").as_posix()
                   for p in (ROOT / "docs").glob("*/*.md")
                   if not p.name.endswith(".en.md") and p.parent.name != "labs")


def html_of(site: Path, rel: str) -> str:
    return (site / rel).read_text(encoding="utf-8")


def ids(html: str) -> set[str]:
    return set(re.findall(r'\sid="([^"]*)"', html))


# 1. Readable labs ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("rel", LAB_PAGES)
def test_lab_skip_link_and_toc_reach_a_heading_and_no_id_is_empty(built_site, rel):
    html = html_of(built_site, rel)
    assert 'id=""' not in html, "a heading with an empty id (nbconvert's slug of an all-Chinese title)"
    present = ids(html)
    skip = re.search(r'<a href="#([^"]+)" class="md-skip"', html)
    assert skip and skip.group(1) in present, f"the skip link #{skip and skip.group(1)} reaches nothing"
    toc = re.search(r'<nav class="md-nav md-nav--secondary".*?</nav>', html, re.S)
    missing = [a for a in re.findall(r'href="#([^"]+)"', toc.group(0) if toc else "") if a not in present]
    assert not missing, f"table-of-contents links to no heading: {missing[:5]}"


@pytest.mark.parametrize("stem", STEMS)
def test_english_lab_page_is_titled_from_the_notebook_metadata(built_site, stem):
    title = lab_meta(ROOT / f"notebooks/{stem}.ipynb").title_en
    html = html_of(built_site, f"en/labs/{stem}/index.html")
    assert f"<title>{title} - " in unescape(html)
    h1 = re.search(r"<h1[^>]*>(.*?)<", html, re.S).group(1)
    assert unescape(h1).strip() == title
    home = unescape(html_of(built_site, "en/index.html"))
    assert re.search(rf'href="labs/{stem}/"[^>]*>\s*<span class="md-ellipsis">\s*{re.escape(title)}\s*<', home), \
        "the English navigation shows another title for this lab"


@pytest.mark.parametrize("rel", LAB_PAGES)
def test_every_figure_is_described(built_site, rel):
    html = html_of(built_site, rel)
    assert DEFAULT_ALT not in html
    for img in re.findall(r"<img\b[^>]*>", html):
        alt = re.search(r'alt="([^"]*)"', img)
        assert alt and len(alt.group(1).strip()) > 8, f"an image without a real description: {img[:120]}"


def test_lab_output_css_scrolls_wide_output_and_hides_prompts():
    css = (ROOT / "docs/stylesheets/kb.css").read_text()
    assert re.search(r"jp-OutputArea-output pre \{[^}]*white-space: pre;[^}]*overflow-x: auto", css)
    assert re.search(r"jp-InputPrompt,\s*\.md-typeset \.jupyter-wrapper \.jp-OutputPrompt \{ display: none", css)


def _widest_output(pg):
    return pg.evaluate("""() => {
        let best = null;
        for (const pre of document.querySelectorAll('.jp-OutputArea-output pre'))
            if (!best || pre.scrollWidth > best.scrollWidth) best = pre;
        const box = best.closest('.jp-OutputArea-output');
        const scroller = best.scrollWidth > best.clientWidth ? best : box;
        scroller.scrollLeft = 80;
        return {content: best.scrollWidth, shown: scroller.clientWidth, left: scroller.scrollLeft,
                lines: best.textContent.split('\\n').length, height: best.getBoundingClientRect().height,
                lineHeight: parseFloat(getComputedStyle(best).lineHeight),
                page: document.documentElement.scrollWidth, prompts: [...document.querySelectorAll(
                    '.jp-InputPrompt, .jp-OutputPrompt')].filter(p => p.offsetWidth > 0).length};
    }""")


@pytest.mark.browser
def test_wide_lab_output_scrolls_sideways_on_a_phone(browser, site_url):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                              has_touch=True)
    try:
        pg = ctx.new_page()
        pg.goto(site_url + "labs/02-kernel-fusion/", wait_until="load")
        got = _widest_output(pg)
        assert got["content"] > got["shown"], "the widest output fits a phone: nothing to test"
        assert got["left"] > 0, "the wide output does not scroll sideways"
        assert got["page"] <= 390 + 1, f"the page itself scrolls sideways ({got['page']} px)"
        assert got["height"] <= got["lines"] * got["lineHeight"] + 2, "the output wraps its lines"
        assert got["prompts"] == 0, "In [n]: prompts still take room"
        pg.screenshot(path=str(SHOTS / "lab-phone.png"))
    finally:
        ctx.close()


# 2. Provenance you can see --------------------------------------------------------------------------------

def test_every_quoted_number_has_a_source_mark_linked_to_its_lab(built_site):
    for rel in ["kernels/fusion-slowdown/index.html", "en/inference/llm-inference-optimizations/index.html"]:
        html = html_of(built_site, rel)
        marks = re.findall(r'<button type="button" class="kb-src-mark" aria-expanded="false" '
                           r'aria-controls="([^"]+)"', html)
        assert marks, f"{rel}: no source marks"
        for mark in marks:
            pop = re.search(rf'<span class="kb-src-pop" id="{mark}" role="note" hidden>(.*?)</span></span>',
                            html, re.S)
            assert pop, f"{rel}: mark {mark} opens nothing"
            assert "H200" in pop.group(1) and re.search(r"\d{4}-\d\d-\d\d", pop.group(1))
            assert re.search(r'<a href="(\.\./)+labs/\d\d-[a-z0-9-]+/">', pop.group(1)), "no link to the lab"
    moe = html_of(built_site, "en/moe/moe-in-rl/index.html")
    assert 'class="kb-src kb-src--stale"' in moe and 'class="kb-flag">stale</span>' in moe


@pytest.mark.browser
def test_source_mark_opens_by_tap_and_by_keyboard(page, site_url):  # noqa: F811
    page.goto(site_url + "kernels/fusion-slowdown/", wait_until="networkidle")
    mark = page.locator(".kb-src-mark").first
    pop = page.locator("#" + mark.get_attribute("aria-controls"))
    assert not pop.is_visible()
    mark.click()
    assert mark.get_attribute("aria-expanded") == "true" and pop.is_visible()
    assert "H200" in pop.text_content() and pop.locator("a[href*='labs/']").count() == 1
    page.mouse.click(5, 400)  # elsewhere: it closes
    assert not pop.is_visible() and mark.get_attribute("aria-expanded") == "false"
    mark.focus()
    page.keyboard.press("Enter")
    assert pop.is_visible()
    page.keyboard.press("Escape")
    assert not pop.is_visible()
    page.keyboard.press("Space")
    assert pop.is_visible(), "Space on the focused mark (focus returns to it after Escape) opens it"
    page.screenshot(path=str(SHOTS / "source-note.png"))


# 3. From question to practice -----------------------------------------------------------------------------

@pytest.mark.parametrize("slug", QUESTIONS)
def test_question_header_shows_labs_difficulty_tags_edit_link_and_date(built_site, slug):
    for lang, prefix, suffix in [("zh", "", ".md"), ("en", "en/", ".en.md")]:
        src = ROOT / "docs" / (slug + suffix)
        meta, _ = split_front_matter(src.read_text(encoding="utf-8"), str(src))
        html = html_of(built_site, f"{prefix}{slug}/index.html")
        head = re.search(r'<p class="kb-meta">.*?</p>\s*(<div class="kb-practice">.*?</ul>\s*</div>)?', html, re.S)
        assert head, f"{lang} {slug}: no question header"
        head = head.group(0)
        assert f'data-difficulty="{meta["difficulty"]}"' in head
        tags_page = ids(html_of(built_site, f"{prefix}tags/index.html"))
        for tag in meta["tags"]:
            link = re.search(rf'<a class="kb-tag" href="[^"#]*tags/#([^"]+)">{re.escape(tag)}</a>', head)
            assert link and unescape(link.group(1)) in tags_page, f"{slug}: tag {tag} does not reach the tags page"
        for nb in meta["labs"]:
            stem = Path(nb).stem
            assert re.search(rf'<a href="(\.\./)+labs/{stem}/">', head), f"{slug}: no link to {stem}"
            assert f'href="{colab_url(nb)}"' in head
        edit = f"edit/main/docs/{slug}{suffix}"
        assert re.search(rf'<a href="https://github\.com/[^"]+/{re.escape(edit)}"[^>]*rel="edit"', html)
        date = last_change([src])
        if date:
            assert re.search(rf'md-source-file__fact">.*?{date}', html, re.S), f"{slug}: no last-change date"


def test_last_change_is_git_or_nothing(tmp_path):
    assert last_change([ROOT / "mkdocs.yml"]) == subprocess.run(
        ["git", "log", "-1", "--format=%cs", "--", "mkdocs.yml"], cwd=ROOT, capture_output=True,
        text=True).stdout.strip() or None
    loose = tmp_path / "page.md"
    loose.write_text("x")
    assert last_change([loose]) is None, "outside a repository there is no date"
    if subprocess.run(["git", "--version"], capture_output=True).returncode == 0:
        repo = tmp_path / "shallow"
        subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(repo)], check=False,
                       capture_output=True)
        if (repo / "mkdocs.yml").exists():
            assert last_change([repo / "mkdocs.yml"]) is None, "a shallow clone would date every file wrongly"


def test_study_path_lists_every_question_in_three_ordered_tracks(built_site):
    from kb.pages import VOCAB

    for lang, prefix in [("zh", ""), ("en", "en/")]:
        html = html_of(built_site, f"{prefix}study-path/index.html")
        levels = list(VOCAB["difficulty"]) if lang == "zh" else list(VOCAB["difficulty"].values())
        seen = set()
        for track in ["training", "inference", "kernels"]:
            section = re.search(rf'<h2 id="{track}">.*?<ol class="kb-track">(.*?)</ol>', html, re.S)
            assert section, f"{lang}: no {track} track"
            items = re.findall(r'<li data-difficulty="([^"]+)" data-tags="[^"]*"><a href="\.\./([^"]+)/">',
                               section.group(1))
            assert items, f"{lang}: the {track} track is empty"
            ranks = [levels.index(d) for d, _ in items]
            assert ranks == sorted(ranks), f"{lang} {track}: not from the easiest to the hardest"
            seen |= {href for _, href in items}
        assert seen == set(QUESTIONS), f"{lang}: the study path misses {set(QUESTIONS) - seen}"
    nav = html_of(built_site, "index.html")
    assert 'href="study-path/"' in nav


@pytest.mark.browser
def test_study_path_filters_by_difficulty_and_tag(page, site_url):  # noqa: F811
    page.goto(site_url + "en/study-path/", wait_until="networkidle")
    items = page.locator("ol.kb-track li")
    total = items.count()
    visible = lambda: sum(items.nth(i).is_visible() for i in range(items.count()))  # noqa: E731
    assert page.locator("form.kb-filter").is_visible() and visible() == total
    page.locator("input[name='difficulty'][value='Expert']").uncheck()
    expert = page.locator("ol.kb-track li[data-difficulty='Expert']").count()
    assert expert and visible() == total - expert
    page.locator("input[name='difficulty'][value='Expert']").check()
    page.locator("input[name='tag'][value='NCCL']").check()
    shown = [items.nth(i).get_attribute("data-tags") for i in range(total) if items.nth(i).is_visible()]
    assert shown and all("NCCL" in tags.split("|") for tags in shown)
    assert page.locator(".kb-track__none:visible").count() >= 1, "an emptied track says so"


# 4. Defects -----------------------------------------------------------------------------------------------

def test_404_page_switches_to_the_language_roots(built_site):
    html = html_of(built_site, "404.html")
    links = dict((lang, href) for href, lang in re.findall(r'<a href="([^"]+)" hreflang="([a-z]+)"', html))
    assert links == {"zh": "/ai-infra-kb/", "en": "/ai-infra-kb/en/"}, links
    heads = re.findall(r'<link rel="alternate" href="([^"]+)" hreflang', html)
    assert heads == ["/ai-infra-kb/", "/ai-infra-kb/en/"], "the 404 page kept the last page's twins"


def test_each_language_has_its_own_404_page(built_site):
    """The root 404 is the default language's (static hosts serve it for any missing path); /en/404.html is
    English (hosts that look up the nearest 404 serve it under /en/)."""
    root, en = html_of(built_site, "404.html"), html_of(built_site, "en/404.html")
    assert re.search(r'<html lang="zh', root) and re.search(r'<html lang="en"', en)
    assert "页面不存在" in root and "Not found" in en and "页面不存在" not in en
    assert 'href="/ai-infra-kb/study-path/"' in root and 'href="/ai-infra-kb/en/study-path/"' in en
    for html in (root, en):
        links = dict((lang, href) for href, lang in re.findall(r'<a href="([^"]+)" hreflang="([a-z]+)"', html))
        assert links == {"zh": "/ai-infra-kb/", "en": "/ai-infra-kb/en/"}, links


def test_alternate_links_point_where_a_sitemap_is(built_site):
    for rel in ["kernels/fusion-slowdown/index.html", "en/labs/00-gpu-ceilings/index.html", "index.html"]:
        html = html_of(built_site, rel)
        for href in re.findall(r'<link rel="alternate" href="([^"]+)" hreflang', html):
            assert href in ("/ai-infra-kb/", "/ai-infra-kb/en/"), f"{rel}: {href}"
            assert (built_site.parent / href.strip("/") / "sitemap.xml").is_file()
    en = html_of(built_site, "en/sitemap.xml")
    assert "/en/kernels/fusion-slowdown/</loc>" in en and "<loc>https://ai-infra-kb.github.io/ai-infra-kb/</loc>" not in en
    twin = html_of(built_site, "kernels/fusion-slowdown/index.html")
    assert '<a href="../../en/kernels/fusion-slowdown/" hreflang="en"' in twin, "the switch leads to the twin"


@pytest.mark.browser
def test_language_switch_keeps_the_anchor_and_the_place(page, site_url):  # noqa: F811
    # with an anchor: zh #_3 is the third h2 (深入解析); its English twin's is #deep-dive
    page.goto(site_url + "kernels/fusion-slowdown/#_3", wait_until="networkidle")
    page.hover(".md-header__option .md-select")
    page.click("a[hreflang='en']")
    page.wait_for_load_state("networkidle")
    page.wait_for_function("() => location.hash === '#deep-dive'", timeout=5000)
    top = page.evaluate("() => document.getElementById('deep-dive').getBoundingClientRect().top")
    assert 0 <= top < 200, f"the anchor's heading is at {top} px"
    # without one: scrolled to the sixth heading, back to Chinese
    page.evaluate("() => { const h = document.querySelectorAll('.md-content h2[id], .md-content h3[id]')[6];"
                  " history.replaceState(null, '', location.pathname); window.scrollTo(0, h.offsetTop + 20); }")
    page.hover(".md-header__option .md-select")
    page.click("a[hreflang='zh']")
    page.wait_for_load_state("networkidle")
    assert "/en/" not in page.url
    top = page.evaluate("() => document.querySelectorAll('.md-content h2[id], .md-content h3[id]')[6]"
                        ".getBoundingClientRect().top")
    assert -200 < top < 250, f"the reader's heading is at {top} px after the switch"
    assert page.evaluate("() => window.scrollY") > 500
