"""The built site: strict build, segmented Chinese search, rendered labs, no outside requests, and
the build failing loudly on a broken include, anchor or lab link."""
import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest

from kb.labs import colab_url
from kb.results import result_for
from conftest import mkdocs_build


ROOT = Path(__file__).resolve().parents[1]
LAB = "notebooks/00-gpu-ceilings.ipynb"  # linked from the kernel pages


def test_build_is_fast_enough(built_site):
    seconds = float((ROOT / "test-artifacts/build-seconds.txt").read_text())
    assert seconds < 60, f"mkdocs build took {seconds:.1f} s (target < 60 s on the 2-core CI machine)"


def test_chinese_search_index_is_segmented(built_site):
    """jieba cut the Chinese text into words (U+200B between them), and each query word is in the
    index as the same tokens the browser's segmenter will look for."""
    docs = json.loads((built_site / "search/search_index.json").read_text())["docs"]
    text = "\n".join(d["text"] + d["title"] for d in docs if not d["location"].startswith("en/"))
    assert text.count("\u200b") > 1000, "the index is not segmented: is jieba installed?"
    for word in ["全归约", "集合通信", "显存"]:
        pattern = "\u200b?".join(word)
        assert re.search(rf"\u200b{pattern}\u200b", text), f"{word} is not in the index as whole tokens"


def test_every_question_page_exists_in_both_languages(built_site):
    for md in (ROOT / "docs").glob("*/*.md"):
        if md.name.endswith(".en.md") or md.parent.name in {"labs"}:
            continue
        rel = md.relative_to(ROOT / "docs").with_suffix("")
        assert (built_site / rel / "index.html").is_file()
        en = built_site / "en" / rel / "index.html"
        assert en.is_file() and '<html lang="en"' in en.read_text()


@pytest.mark.parametrize("stem", sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_lab_page_renders_the_notebook_with_its_banner(built_site, stem):
    from kb.labs import lab_meta
    from kb.render import hardware_needs

    lab = f"notebooks/{stem}.ipynb"
    html = (built_site / f"labs/{stem}/index.html").read_text()
    assert '"cells": [' not in html, "the lab page is raw notebook JSON (i18n + mkdocs-jupyter)"
    assert "jp-Notebook" in html or "jupyter-wrapper" in html
    assert f'href="{colab_url(lab)}"' in html
    result = result_for(lab)
    if result:
        state = "kb-fresh" if result.fresh and not result.legacy else "kb-stale"
        assert result.data["device"]["name"] in html and f"kb-provenance {state}" in html
        if '"image/png"' in result.notebook_path.read_text():  # not every lab draws a plot
            assert "data:image/png;base64" in html, "the GPU result's plots are missing"
    meta = lab_meta(ROOT / lab)
    assert all(n in html for n in hardware_needs(lab, "zh"))
    en = (built_site / f"en/labs/{stem}/index.html").read_text()
    assert "Open in Colab" in en and all(n in en for n in hardware_needs(lab, "en"))


def test_question_page_shows_its_lab_card_and_glossary_tooltips(built_site):
    html = (built_site / "kernels/kernel-level-optimization/index.html").read_text()
    assert "kb-lab-card" in html and colab_url(LAB) in html
    assert re.search(r'<abbr title="[^"]+">', html)
    assert "难度" in html


def test_no_asset_comes_from_another_host(built_site):
    offenders = []
    for page in built_site.rglob("*.html"):
        for m in re.finditer(r'<(script|link|img|iframe)\b[^>]*\b(?:src|href)="(https?:)?//[^"]+"', page.read_text()):
            if m.group(1) == "link" and "stylesheet" not in m.group(0) and "preconnect" not in m.group(0):
                continue  # <link rel="canonical|alternate"> is metadata, not a request
            offenders.append(f"{page.relative_to(built_site)}: {m.group(0)[:120]}")
    assert not offenders, offenders[:5]
    assert (built_site / "assets/vendor/mermaid.min.js").stat().st_size > 1_000_000
    assert (built_site / "assets/vendor/mathjax/tex-chtml.js").stat().st_size > 1_000_000


def test_footer_states_the_licences(built_site):
    html = (built_site / "index.html").read_text()
    assert "CC BY-SA 4.0" in html and "Apache-2.0" in html


# Broken inputs fail the strict build, naming the file and the problem.

@pytest.fixture
def fixture_site(tmp_path):
    """The real configuration over a two-page docs folder; the config sits in the repository root so
    that every relative path in mkdocs.yml (hooks, overrides, snippets) resolves as in the real build."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# 首页\n")
    (docs / "index.en.md").write_text("# Home\n")
    config = ROOT / f".fixture-mkdocs-{tmp_path.name}.yml"
    (docs / "labs").mkdir()  # the target of mkdocs.yml's redirect must exist
    (docs / "labs/03-inference-paged-kv.ipynb").symlink_to(ROOT / "notebooks/03-inference-paged-kv.ipynb")
    config.write_text(f"INHERIT: mkdocs.yml\ndocs_dir: {docs}\n"
                      "nav: [index.md, page.md, labs/03-inference-paged-kv.ipynb]\n")
    yield config, docs / "page.md", tmp_path / "site"
    config.unlink()


def test_fixture_site_builds_when_nothing_is_broken(fixture_site):
    config, page_path, site = fixture_site
    page_path.write_text('# 页\n\n```python\n--8<-- "common/record.py"\n```\n\n[首页](index.md)\n')
    r = mkdocs_build(config, site)
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.parametrize("page, words", [
    ('# 页\n\n```python\n--8<-- "ceilings/no_such_file.py:copy"\n```\n', ["no_such_file.py", "could not be found"]),
    ('# 页\n\n```python\n--8<-- "common/record.py:no_such_section"\n```\n', ["no_such_section"]),
    ("# 页\n\n[不存在的锚点](index.md#no-such-anchor)\n", ["no-such-anchor"]),
    ("# 页\n\n[不存在的页面](missing.md)\n", ["missing.md"]),
])
def test_broken_page_fails_the_build(fixture_site, page, words):
    config, page_path, site = fixture_site
    page_path.write_text(textwrap.dedent(page))
    r = mkdocs_build(config, site)
    assert r.returncode != 0, "the build should have failed"
    for w in words:
        assert w in r.stderr, r.stderr[-2000:]


def test_tags_pages_list_every_question_in_their_language(built_site):
    from kb.pages import question_pages, split_front_matter
    for lang, tags_page in (("zh", built_site / "tags/index.html"), ("en", built_site / "en/tags/index.html")):
        html = tags_page.read_text()
        for md in question_pages():
            if md.name.endswith(".en.md") != (lang == "en"):
                continue
            meta, _ = split_front_matter(md.read_text(), md.name)
            slug = f"../{md.parent.name}/{md.name.split('.')[0]}/"
            assert f'href="{slug}"' in html, f"{tags_page}: no link to {slug}"
            for tag in meta["tags"]:
                assert f">{tag}</span>" in html, f"{tags_page}: tag {tag} missing"


def test_search_dictionary_keeps_every_chinese_term_whole(built_site):
    """jieba alone splits 全归约 into 全 + 归约, and a search for the term then ranks pages by how often they
    say 归约 (reduction); hooks/search_terms.py adds every Chinese glossary term, tag and topic as one word."""
    import yaml

    from kb.search_terms import chinese_terms

    words = set(chinese_terms())
    terms = [t["zh"] for t in yaml.safe_load((ROOT / "schemas/glossary.yml").read_text(encoding="utf-8"))]
    terms += list(yaml.safe_load((ROOT / "schemas/vocabulary.yml").read_text(encoding="utf-8"))["tags"])
    missing = [t for t in terms if " " not in t and re.search(r"[\u4e00-\u9fff]", t) and t not in words]
    assert not missing, f"kb/search_terms.py leaves out {missing}"
    docs = json.loads((built_site / "search/search_index.json").read_text())["docs"]
    text = "\n".join(d["text"] for d in docs if d["location"].startswith("distributed/nccl-timeout/"))
    for word in ["全归约", "集合通信"]:
        assert re.search(rf"(^|[\s\u200b]){word}([\s\u200b]|$)", text), f"{word} is split in the index"


def test_old_lab_urls_redirect_in_both_languages(built_site):
    for prefix in ("", "en/"):
        html = (built_site / f"{prefix}labs/03-paged-kv-cache/index.html").read_text()
        assert "url=../03-inference-paged-kv/" in html, f"/{prefix}labs/03-paged-kv-cache/ does not redirect"


def test_question_pages_show_where_their_numbers_come_from(built_site):
    from kb.results import result_for

    commit = result_for("03-inference-paged-kv").commit[:10]
    zh = (built_site / "inference/llm-inference-optimizations/index.html").read_text()
    en = (built_site / "en/inference/llm-inference-optimizations/index.html").read_text()
    assert "本页实测数字的来源" in zh and f"提交 {commit}" in zh
    assert "Where this page&rsquo;s measured numbers come from" in en or "Where this page's measured numbers" in en
    moe = (built_site / "en/moe/moe-in-rl/index.html").read_text()
    assert 'class="kb-flag">stale</span>' in moe, "numbers from a stale legacy result must say so beside them"


def test_chinese_sentences_on_their_own_lines_join_without_a_space(built_site):
    html = (built_site / "kernels/fusion-slowdown/index.html").read_text()
    body = re.sub(r"<pre\b.*?</pre>", "", html, flags=re.S)
    assert not re.search(r"。\n[^\s<]", body), "a line break after 。 would show as a space"


def test_english_navigation_comes_from_the_string_catalogue(built_site):
    html = (built_site / "en/index.html").read_text()
    tabs = re.findall(r'class="md-tabs__link[^"]*"[^>]*>\s*([^<]+?)\s*<', html)
    assert "Labs" in tabs and "Inference" in tabs and "实验" not in tabs
