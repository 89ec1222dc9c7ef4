"""Markup from data never becomes markup on the site.

Device names, metric labels and units, table titles and column names, lab titles and glossary entries
are planted with a script tag, quotes, a pipe, an ampersand and Markdown punctuation; what the site's own
Markdown (the extensions of mkdocs.yml) makes of each renders the planted text as text, in well-formed
HTML. Page titles go into the HTML as they are, so the front matter schema refuses < and >.
"""
import html
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import markdown
import pytest
import yaml

import kb.glossary
import kb.results
from kb import render
from kb.labs import mkdocs_config
from kb.markers import find
from kb.pages import PageError, check_meta

ROOT = Path(__file__).resolve().parents[1]
LAB = "notebooks/00-gpu-ceilings.ipynb"
PLANT = '<script>alert(1)</script> "q" \'s\' a|b & c `code` $x$ *em* _u_ [l](x) {: #id}'
VOID = {"br", "hr", "img", "input", "meta", "link", "wbr", "col", "source"}


def md(text: str) -> str:
    cfg = mkdocs_config()
    return markdown.Markdown(extensions=cfg["markdown_extensions"], extension_configs=cfg["mdx_configs"]).convert(text)


def plain(text: str) -> str:
    """What a reader sees of the planted text: one line."""
    return " ".join(text.split())


class Tree(HTMLParser):
    """Checks tags open and close in order and collects text, attributes and table rows."""

    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)
        self.stack, self.tags, self.attrs, self.text, self.rows = [], [], [], [], []
        self.feed(source)
        self.close()
        assert not self.stack, f"unclosed {self.stack} in {source}"

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        if tag == "tr":
            self.rows.append(0)
        if tag in ("td", "th"):
            self.rows[-1] += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def safe(source: str) -> Tree:
    assert "<script" not in source.lower(), source
    tree = Tree(source)
    assert "script" not in tree.tags
    return tree


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """A verified result of LAB whose device name, labels, units and table carry PLANT, as the default GPU."""
    name = f"NVIDIA H200 {PLANT}"
    slug = kb.results.gpu_slug(name)
    src = ROOT / "results/nvidia-h200/00-gpu-ceilings"
    (tmp_path / slug).mkdir()
    shutil.copy(src.with_suffix(".ipynb"), tmp_path / slug / "00-gpu-ceilings.ipynb")
    data = json.loads(src.with_suffix(".json").read_text(encoding="utf-8"))
    data["device"]["name"] = name
    data["labels"] = {k: {"unit": PLANT, "zh": PLANT, "en": PLANT} for k in data["metrics"]}
    data["tables"] = {"planted": {"columns": [PLANT, "n"], "rows": [[PLANT, 1.0]], "zh": PLANT, "en": PLANT}}
    (tmp_path / slug / "00-gpu-ceilings.json").write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(kb.results, "RESULTS", tmp_path)
    monkeypatch.setattr(kb.results, "DEFAULT_GPU", slug)
    result = kb.results.result_for(LAB)
    assert result is not None and result.data["device"]["name"] == name
    return result


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_metric_labels_and_units_stay_text_in_the_table(planted, lang):
    tree = safe(md(render.metrics_table(planted, lang)))
    assert tree.rows == [2] * (len(planted.data["metrics"]) + 1), "a planted | split a row"
    assert "".join(tree.text).count(plain(PLANT)) == 2 * len(planted.data["metrics"])


def test_table_title_columns_and_cells_stay_text(planted):
    tree = safe(md(render.data_tables(planted, "en")))
    assert tree.tags[:2] == ["details", "summary"] and tree.text[1] == plain(PLANT)
    assert tree.rows == [2, 2]
    assert "".join(tree.text).count(plain(PLANT)) == 3


@pytest.mark.parametrize("where", ["prose", "table"])
def test_quoted_metric_keeps_the_device_name_in_its_link_title(planted, where):
    marker = find(f"<!-- metric 00-gpu-ceilings copy_bandwidth_gbps gpu={planted.gpu} -->", "x")[0]
    quoted = render.quote(marker, "en", "kernels")
    source = quoted if where == "prose" else f"| a | b |\n| --- | --- |\n| {quoted} | c |\n"
    tree = safe(md(source))
    titles = [v for k, v in tree.attrs if k == "title"]
    assert titles == [render.provenance(planted, "en")] and plain(PLANT) in titles[0]
    assert f"({plain(PLANT)}" in "".join(tree.text) or f"{plain(PLANT)})" in "".join(tree.text)
    if where == "table":
        assert tree.rows == [2, 2]


def test_banner_lab_header_and_sources_stay_text(planted):
    header = render.lab_header(LAB, planted, "zh")  # raw HTML, put in after Markdown
    assert plain(PLANT) in "".join(safe(header).text)
    marker = find("<!-- metric 00-gpu-ceilings copy_bandwidth_gbps -->", "x")
    tree = safe(md(render.sources(marker, "en")))
    assert plain(PLANT) in "".join(tree.text)


def test_lab_card_title_and_result_stay_text(planted, monkeypatch):
    from kb import labs
    nb = labs.read_notebook(ROOT / LAB)
    nb["cells"][0]["source"] = f"# {PLANT}\n"
    nb["metadata"]["kb"]["title_en"] = PLANT
    monkeypatch.setattr(render, "read_notebook", lambda _path: nb)
    for lang in ("zh", "en"):
        card = render.lab_card(LAB, lang, "kernels")
        tree = safe(md(card))
        links = [v for k, v in tree.attrs if k == "href"]
        assert "../labs/00-gpu-ceilings.ipynb" in links and "x" not in links, "a planted [..](..) made a link"
        text = "".join(tree.text)
        assert text.count(plain(PLANT)) >= 3  # the title, the banner, the metric rows


@pytest.fixture
def planted_glossary(tmp_path, monkeypatch):
    entry = {"zh": f"毒词{PLANT}", "en": f"poison {PLANT}", "aliases": ["R&D"],
             "zh_def": f"释义 {PLANT}", "en_def": f"Definition: {PLANT}"}
    path = tmp_path / "glossary.yml"
    path.write_text(yaml.safe_dump([entry], allow_unicode=True), encoding="utf-8")
    monkeypatch.setattr(kb.glossary, "GLOSSARY", path)
    return entry


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_glossary_table_keeps_entries_as_text(planted_glossary, lang):
    tree = safe(md(kb.glossary.table(lang)))
    assert tree.rows == [3, 3]
    cells = [t for t in tree.text if t.strip()]
    other = "en" if lang == "zh" else "zh"
    assert cells[-3:] == [plain(planted_glossary[lang]), plain(planted_glossary[other]),
                          plain(planted_glossary[lang + "_def"])]


def test_glossary_tooltip_is_one_escaped_attribute(planted_glossary):
    from test_hooks import config, load, page
    hook = load("glossary")
    term = planted_glossary["en"]
    content = f"<p>Before {html.escape(term, quote=False)} after, and R&amp;D; &amp;amp; stays.</p>"
    out = hook.on_page_content(content, page("kernels/x.md"), config("en"), None)
    tree = safe(out)
    titles = [v for k, v in tree.attrs if k == "title"]
    want = f"{plain(planted_glossary['zh'])} / {plain(term)}: {plain(planted_glossary['en_def'])}"
    assert titles == [want], out
    assert tree.tags.count("abbr") == 1 and f">{html.escape(term, quote=False)}</abbr>" in out
    assert "&amp;amp;" in out and not re.search(r"&[^;\s]*<abbr", out), "a term was matched inside an entity"


def test_glossary_term_is_found_next_to_an_entity_not_inside_it(tmp_path, monkeypatch):
    from test_hooks import config, load, page
    path = tmp_path / "glossary.yml"
    path.write_text(yaml.safe_dump([{"zh": "放大", "en": "amp", "zh_def": "x", "en_def": "y"},
                                    {"zh": "研发", "en": "R&D", "zh_def": "x", "en_def": "y"}]))
    monkeypatch.setattr(kb.glossary, "GLOSSARY", path)
    out = load("glossary").on_page_content("<p>a &amp; b; R&amp;D here; an amp.</p>", page("k/x.md"), config("en"),
                                           None)
    assert out == ('<p>a &amp; b; <abbr title="研发 / R&amp;D: y">R&amp;D</abbr> here; an '
                   '<abbr title="放大 / amp: y">amp</abbr>.</p>'), out


@pytest.mark.parametrize("title", ["<script>alert(1)</script>什么？", "a > b 吗？", "两行\n标题", "尾部换行\n"])
def test_front_matter_schema_refuses_markup_and_line_breaks_in_titles(title):
    meta = {"title": title, "tags": ["推理"], "difficulty": "进阶", "labs": []}
    with pytest.raises(PageError, match="docs/x.md: front matter field title"):
        check_meta(meta, "zh", "docs/x.md")
    check_meta(dict(meta, title='什么是 "C#"：a | b & c？'), "zh", "docs/x.md")


def test_md_text_is_the_same_text_after_markdown():
    for s in [PLANT, "a\\b", "x\n  y", "&amp;", "<!-- c -->", "[^1]", "**b**", "~~s~~"]:
        tree = safe(md(f"| {render.md_text(s)} |\n| --- |\n| {render.md_text(s)} |\n"))
        assert tree.rows == [1, 1] and [t for t in tree.text if t.strip()] == [plain(s), plain(s)]


# The real build over a small docs folder: the planted title, glossary entry and result reach the HTML as text.

TITLE = 'What is "C#": a | b & c\'s #1, `x` $y$?'


def _typed(text: str) -> str:
    """How an author types text with markup characters in prose: backslash escapes, & < > as references."""
    return re.sub(r"([\\`*_{}\[\]#+!|$])", r"\\\1", html.escape(text, quote=False))


@pytest.mark.slow
def test_planted_title_glossary_term_and_result_build_as_text(tmp_path, monkeypatch, planted, planted_glossary):
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    from kb.new_question import page

    docs = tmp_path / "docs"
    (docs / "kernels").mkdir(parents=True)
    (docs / "labs").mkdir()
    (docs / "index.md").write_text("# 首页\n")
    (docs / "index.en.md").write_text("# Home\n")
    (docs / "glossary.md").write_text("# 术语表\n\n<!-- glossary -->\n")
    shutil.copy(ROOT / LAB, docs / "labs/00-gpu-ceilings.ipynb")
    used = {"zh": planted_glossary["zh"], "en": planted_glossary["en"]}
    for lang, suffix, tag in (("zh", ".md", "GPU 架构"), ("en", ".en.md", "GPU architecture")):
        text = page(lang, TITLE, [tag], "进阶" if lang == "zh" else "Intermediate", [LAB])
        quoted = f"<!-- metric 00-gpu-ceilings copy_bandwidth_gbps gpu={planted.gpu} -->"
        plant = f"{_typed(used[lang])} here.\n\n| a | b |\n| --- | --- |\n| {quoted} | c |\n"
        head = "\n## 深入解析\n\n" if lang == "zh" else "\n## Deep dive\n\n"
        assert head in text
        (docs / f"kernels/planted{suffix}").write_text(text.replace(head, head + plant + "\n"), encoding="utf-8")
    config = ROOT / f".fixture-mkdocs-{tmp_path.name}.yml"
    config.write_text(f"INHERIT: mkdocs.yml\ndocs_dir: {docs}\n"
                      "nav: [index.md, kernels/planted.md, labs/00-gpu-ceilings.ipynb, glossary.md]\n")
    site = tmp_path / "site"
    try:
        cfg = load_config(str(config), site_dir=str(site))
        cfg.plugins["redirects"].config["redirect_maps"] = {}  # its target lab is not in this docs folder
        build(cfg)  # strict (mkdocs.yml): any warning aborts
    finally:
        config.unlink()
    for lang, prefix in (("zh", ""), ("en", "en/")):
        out = (site / f"{prefix}kernels/planted/index.html").read_text(encoding="utf-8")
        assert "<script>alert" not in out and "alert(1)</script>" not in out
        tree = Tree(out)
        text = "".join(tree.text)
        assert TITLE in text, "the page title"
        assert [m for m in re.findall(r"<h1[^>]*>(.*?)</h1>", out, re.S) if html.unescape(m).strip() == TITLE]
        titles = {v for k, v in tree.attrs if k == "title"}
        g = planted_glossary
        tip = f"{plain(g['zh'])} / {plain(g['en'])}: {plain(g[lang + '_def'])}"
        assert tip in titles, "the glossary tooltip"
        assert render.provenance(planted, lang) in titles, "the quoted metric's link title"
        assert text.count(plain(PLANT)) >= 5, "device name, labels, units and table as text"
    gloss = (site / "glossary/index.html").read_text(encoding="utf-8")
    assert "<script>alert" not in gloss
    rows = re.findall(r"<tr>(.*?)</tr>", gloss, re.S)
    assert len(rows) == 2 and all(r.count("<td") + r.count("<th") == 3 for r in rows)
    assert plain(planted_glossary["zh_def"]) in html.unescape(rows[1])
    lab = (site / "labs/00-gpu-ceilings/index.html").read_text(encoding="utf-8")
    assert "<script>alert" not in lab
    banner = re.search(r'<p class="kb-provenance[^>]*>(.*?)</p>', lab, re.S).group(1)
    assert "<" not in banner and plain(planted.data["device"]["name"]) in html.unescape(banner)
