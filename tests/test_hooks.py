"""Each MkDocs hook on its own, with stand-in pages (the site tests cover them in the real build)."""
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"hook_{name}", ROOT / "hooks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def page(src_uri: str, meta=None, abs_src_path=None):
    file = SimpleNamespace(src_uri=src_uri, abs_src_path=abs_src_path or str(ROOT / "docs" / src_uri))
    return SimpleNamespace(file=file, meta=meta or {})


def config(lang="zh"):
    return SimpleNamespace(theme={"language": lang}, docs_dir=str(ROOT / "docs"))


def test_glossary_wraps_the_first_use_only_and_leaves_code_and_links_alone():
    glossary = load("glossary")
    html = ("<p>用 <code>全归约</code> 之前，<a href='x'>全归约</a> 链接；正文里的全归约和第二个全归约。</p>"
            "<p>Then TMA copies a tile.</p>")
    out = glossary.on_page_content(html, page("kernels/x.md"), config(), None)
    assert out.count("<abbr") == 2, out
    assert "<code>全归约</code>" in out and "<a href='x'>全归约</a>" in out
    assert out.index("<abbr") > out.index("</a>")
    assert 'title="张量内存加速器 / Tensor Memory Accelerator' in out
    assert glossary.on_page_content(html, page("glossary.md"), config(), None) == html


def test_glossary_page_gets_the_full_table():
    from kb.glossary import terms
    hook = load("shortcodes")
    md = hook.on_page_markdown("# 术语表\n\n<!-- glossary -->\n", page("glossary.md"), config(), None)
    assert md.count("\n| ") == len(terms()) + 2 and "| 全归约 | all-reduce |" in md


def test_front_matter_hook_names_the_file(tmp_path):
    hook = load("front_matter")
    good = ROOT / "docs/kernels/fusion-slowdown.md"
    assert hook.on_page_markdown("x", page("kernels/fusion-slowdown.md"), config(), None) == "x"
    bad = tmp_path / "docs/kernels/bad.md"
    bad.parent.mkdir(parents=True)
    bad.write_text(good.read_text().replace("difficulty: ", "difficulty: 很难 #"))
    bad.with_suffix(".en.md").write_text(good.with_suffix(".en.md").read_text())
    cfg = SimpleNamespace(theme={"language": "zh"}, docs_dir=str(tmp_path / "docs"))
    with pytest.raises(PluginError, match="docs/kernels/bad.md: difficulty"):
        hook.on_page_markdown("x", page("kernels/bad.md", abs_src_path=str(bad)), cfg, None)


def test_lab_cards_replace_the_marker():
    hook = load("shortcodes")
    md = "## 实验\n\n<!-- lab-cards -->\n"
    none = hook.on_page_markdown(md, page("moe/x.md", {"labs": []}), config(), None)
    assert "<!-- lab-cards -->" not in none and "尚未发布" in none
    card = hook.on_page_markdown(md + "<!-- metric 00-gpu-ceilings copy_bandwidth_gbps -->",
                                 page("kernels/x.md", {"labs": ["notebooks/00-gpu-ceilings.ipynb"]}), config("en"), None)
    assert "(../labs/00-gpu-ceilings.ipynb)" in card and "Open in Colab" in card
    assert "Where this page's measured numbers come from" in card and "commit" in card
    with pytest.raises(PluginError, match="99-missing"):
        hook.on_page_markdown(md, page("kernels/x.md", {"labs": ["notebooks/99-missing.ipynb"]}), config(), None)


def test_question_header_shows_difficulty():
    hook = load("question_header")
    md = hook.on_page_markdown("## 简答\n", page("kernels/x.md", {"difficulty": "专家", "source": "000_ab.txt"}),
                               config(), None)
    assert md.startswith('<p class="kb-meta">') and "难度: 专家" in md
    assert hook.on_page_markdown("# 首页\n", page("index.md"), config(), None) == "# 首页\n"


def test_vendor_assets_refuse_to_build_without_node_modules(monkeypatch, tmp_path):
    hook = load("vendor_assets")
    monkeypatch.setattr(hook, "ROOT", tmp_path)
    with pytest.raises(PluginError, match="make setup"):
        hook.on_files([], SimpleNamespace())


def test_metric_shortcodes_quote_the_verified_value_and_fail_on_unknown_names():
    from kb.results import result_for

    hook = load("shortcodes")
    result = result_for("00-gpu-ceilings")
    copy = result.data["metrics"]["copy_bandwidth_gbps"]
    md = hook.on_page_markdown("拷贝 <!-- metric 00-gpu-ceilings copy_bandwidth_gbps -->，比例 "
                               "<!-- metric 00-gpu-ceilings ridge_point_flop_per_byte -->。",
                               page("kernels/x.md"), config(), None)
    assert f"[{copy:,.0f} GB/s](../labs/00-gpu-ceilings.ipynb \"NVIDIA H200" in md and result.commit[:10] in md
    assert "<!--" not in md and "kb-flag" not in md
    pct = hook.on_page_markdown("<!-- metric 00-gpu-ceilings ridge_point_flop_per_byte % -->", page("a/b/c.md"),
                                config(), None)
    assert pct.startswith(f"[{result.data['metrics']['ridge_point_flop_per_byte'] * 100:.3g}%](../../labs/")
    legacy = hook.on_page_markdown("<!-- metric 06-moe-rl " + next(iter(result_for("06-moe-rl").data["metrics"]))
                                   + " -->", page("moe/x.md"), config("en"), None)
    assert 'class="kb-flag">stale</span>' in legacy, "a stale result must say so beside the number"
    for bad, why in [("<!-- metric 00-gpu-ceilings no_such_metric -->", "no metric 'no_such_metric'"),
                     ("<!-- metric 99-missing copy_bandwidth_gbps -->", "there is no notebooks/99-missing.ipynb"),
                     ("<!-- metric 00-gpu-ceilings copy_bandwidth_gbps gpu=nvidia-a100 -->", "no verified result"),
                     ("<!-- metric 00-gpu-ceilings -->", "kernels/x.md:1")]:
        with pytest.raises(PluginError, match=why):
            hook.on_page_markdown(bad, page("kernels/x.md"), config(), None)
