"""Accessibility in a real browser: axe-core finds no serious or critical problem on the home page, a
question page and a lab page, in both languages and both colour schemes; and every kb-* component
(badges, provenance banners, flags, lab cards) has text contrast of at least 4.5:1 in both schemes.

axe-core comes pinned from npm (package.json's devDependencies) and is injected by the test only:
the site never serves it.
"""
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]
AXE = ROOT / "node_modules/axe-core/axe.min.js"
PAGES = {"home": "", "question": "kernels/kernel-level-optimization/", "lab": "labs/00-gpu-ceilings/"}
SCHEMES = ("default", "slate")  # Material's light and dark palettes (mkdocs.yml theme.palette)
MIN_CONTRAST = 4.5

# Every component kb.css styles, as the site writes it (kb/render.py, hooks/question_header.py). Pages
# show only some of them (a stale banner needs a stale result), so these samples are put on the page too.
SAMPLES = """
<p class="kb-meta"><span class="kb-badge kb-difficulty">难度: 中级</span>
  <span class="kb-badge" title="x">来源</span></p>
<div class="kb-lab-header"><p><a class="kb-badge kb-colab" href="#">在 Colab 中打开</a>
  <span class="kb-badge kb-needs">需要 1 块 GPU</span></p>
  <p class="kb-provenance kb-fresh">GPU 结果: fresh</p><p class="kb-provenance kb-stale">GPU 结果: stale</p>
  <p class="kb-provenance kb-none">暂无 GPU 结果</p></div>
<div class="kb-lab-card"><p><strong><a href="#">实验</a></strong></p>
  <p>拷贝 <a href="#">4,267 GB/s</a> <span class="kb-flag">旧结果</span></p></div>
<p>带宽 <span class="kb-src"><a href="#">4,298 GB/s</a><button class="kb-src-mark" type="button">源</button>
  <span class="kb-src-pop" role="note">NVIDIA H200 · 2026-12-01 · 提交 c9ce68d23c</span></span>
  <span class="kb-src kb-src--stale"><a href="#">325 GB/s</a><button class="kb-src-mark" type="button">源</button></span></p>
<div class="kb-practice"><span class="kb-practice__label">练习</span> <a class="kb-tag" href="#">NCCL</a></div>
<form class="kb-filter"><fieldset><legend>难度</legend><label class="kb-chip"><input type="checkbox"> 进阶</label></fieldset>
  <p class="kb-filter__count">显示 8 题</p></form>
<ol class="kb-track"><li><p><a href="#">如果出现 NCCL timeout</a> <span class="kb-tag">NCCL</span></p></li></ol>
"""

CONTRAST_JS = """
(selector) => {
  const parse = c => {
    const m = c.match(/^rgba?\\(([^)]+)\\)$/);
    if (!m) throw new Error('unexpected colour ' + c);
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  };
  const over = (top, below) => {  // top composited over an opaque colour
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + below[i] * (1 - a)).concat(1);
  };
  const background = el => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    let bg = [255, 255, 255, 1];  // the canvas
    for (const layer of layers.reverse()) bg = over(layer, bg);
    return bg;
  };
  const lum = c => {
    const [r, g, b] = c.slice(0, 3).map(v => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  return [...document.querySelectorAll(selector)].filter(el => el.offsetParent !== null).map(el => {
    const bg = background(el), fg = over(parse(getComputedStyle(el).color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((x, y) => y - x);
    return {text: el.textContent.trim().slice(0, 40), ratio: (hi + 0.05) / (lo + 0.05),
            fg: getComputedStyle(el).color, bg: getComputedStyle(el).backgroundColor};
  });
}
"""

AXE_JS = """
async () => {
  const r = await axe.run(document, {resultTypes: ['violations']});
  return r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => `${v.impact} ${v.id}: ${v.help} (${v.nodes.length}×, e.g. `
              + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(' | ') + ')');
}
"""




def open_page(browser, url: str, scheme: str, locale: str):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900}, locale=locale)
    page = ctx.new_page()
    page.goto(url, wait_until="networkidle")
    if scheme != page.get_attribute("body", "data-md-color-scheme"):
        page.locator("form[data-md-component=palette] label:not([hidden])").first.click()
        page.wait_for_selector(f"body[data-md-color-scheme={scheme}]")
    return page


def kb_classes() -> set[str]:
    return set(re.findall(r"\.(kb-[a-z-]+)", (ROOT / "docs/stylesheets/kb.css").read_text()))


@pytest.fixture(scope="module", autouse=True)
def _axe_installed():
    assert AXE.is_file(), "node_modules/axe-core is missing: run `make setup` (npm ci)"


def test_samples_cover_every_component_in_kb_css():
    missing = kb_classes() - set(re.findall(r"kb-[a-z-]+", SAMPLES))
    assert not missing, f"kb.css styles {missing}: add them to SAMPLES so their contrast is measured"


def low_contrast(page) -> list[str]:
    """Every kb-* component on the page, and one of each put there from SAMPLES, below MIN_CONTRAST."""
    page.evaluate("html => document.querySelector('article').insertAdjacentHTML('beforeend', html)", SAMPLES)
    low, seen = [], set()
    for cls in sorted(kb_classes()):
        # a component's own text, and the links, badges and table cells in it
        for hit in page.evaluate(CONTRAST_JS, f".{cls}, .{cls} a, .{cls} td, .{cls} th"):
            key = (hit["text"], hit["fg"], hit["bg"])
            if hit["text"] and key not in seen and hit["ratio"] < MIN_CONTRAST:
                seen.add(key)
                low.append(f".{cls} {hit['text']!r}: {hit['ratio']:.2f}:1 ({hit['fg']} on {hit['bg']})")
    return low


# One page load serves both checks: axe first, on the page as built, then the components' contrast.
@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("lang", ["zh", "en"])
@pytest.mark.parametrize("name", list(PAGES))
def test_axe_finds_nothing_serious_and_components_have_contrast(browser, site_url, name, lang, scheme):
    prefix = "" if lang == "zh" else "en/"
    page = open_page(browser, site_url + prefix + PAGES[name], scheme, "zh-CN" if lang == "zh" else "en-US")
    page.add_script_tag(path=str(AXE))
    violations = page.evaluate(AXE_JS)
    low = low_contrast(page)
    page.context.close()
    assert not violations, "axe-core:\n" + "\n".join(violations)
    assert not low, f"contrast below {MIN_CONTRAST}:1:\n" + "\n".join(low[:12])


def test_axe_is_not_part_of_the_site(built_site):
    assert not [p for p in built_site.rglob("axe*.js")], "axe-core must never be served"
