"""Search per language: each site searches its own pages, each lab once, with the words readers type.

The queries are written the way a reader would type them (short words, abbreviations, the other
spelling), not copied from titles; for each, the right question page must be among the first three
results. One browser page per language; the box is cleared between queries.
"""
import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

from kb.search_terms import ABBREVIATIONS, index_terms, mark_short_tokens, strip_chrome

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[1]

INFER, MOE, NCCL = "inference/llm-inference-optimizations/", "moe/moe-in-rl/", "distributed/nccl-timeout/"
HOPPER, SLOW, TOOLS = ("kernels/hopper-warp-specialization/", "kernels/fusion-slowdown/",
                       "kernels/fusion-tool-choice/")
KERNEL, AGENT = "kernels/kernel-level-optimization/", "agents/agent-cuda-kernels/"
ZERO, PIPE, TENSOR, CONTEXT, CKPT = ("training/zero-data-parallelism/", "training/pipeline-parallelism/",
                                     "training/tensor-parallelism/", "training/context-parallelism/",
                                     "training/distributed-checkpointing/")
MIXED, MEMORY = "training/mixed-precision-fp8/", "training/memory-estimation/"

ZH_QUERIES = {
    "分页": INFER, "生产者": HOPPER, "消费者": HOPPER, "投机解码": INFER, "量化": INFER,
    "连续批处理": INFER, "大模型推理优化": INFER, "飞行记录器": NCCL, "FR": NCCL, "看门狗": NCCL, "专家并行": MOE, "负载均衡": MOE, "路由": MOE,
    "权重同步": MOE, "TP": TENSOR, "序列并行": TENSOR, "环形注意力": CONTEXT, "长上下文训练": CONTEXT, "检查点": CKPT, "损失缩放": MIXED, "EP": MOE, "寄存器溢出": SLOW, "融合用 Triton 还是 CUTLASS": TOOLS,
    "手写 CUDA": KERNEL, "让 AI 写 CUDA": AGENT, "warp 专用化": HOPPER, "流水线并行": PIPE, "数据并行": ZERO,
    "显存估算": MEMORY, "LoRA 显存": MEMORY,
}
EN_QUERIES = {
    "nccl timeout": NCCL, "flight recorder": NCCL, "FR": NCCL, "watchdog timeout": NCCL, "collective timeout": NCCL,
    "paged attention": INFER, "KV": INFER, "speculative decoding": INFER, "quantization": INFER,
    "TP": TENSOR, "sequence parallelism": TENSOR, "ring attention": CONTEXT, "ulysses": CONTEXT, "async checkpoint": CKPT, "fp8 training": MIXED, "EP": MOE, "PP": PIPE, "expert load balancing": MOE, "optimize moe rl": MOE,
    "zero stage 3": ZERO, "fsdp vs ddp": ZERO, "1F1B bubble": PIPE,
    "how much gpu memory to train": MEMORY, "activation memory recomputation": MEMORY,
    "warp specialization": HOPPER, "WS": HOPPER, "TMA": HOPPER, "producer consumer": HOPPER,
    "register spill": SLOW, "triton vs cutlass": TOOLS, "CuTe DSL": KERNEL, "agent cuda kernel": AGENT,
}
PLACEHOLDER = "() => /键入|Type to/.test(document.querySelector('.md-search-result__meta').textContent)"
RESULTS = ("() => { const m = document.querySelector('.md-search-result__meta');"
           " return m && !/初始化|Initializing|键入|Type to/.test(m.textContent) }")


def _indexes(built_site):
    return {lang: json.loads((built_site / path).read_text(encoding="utf-8"))["docs"]
            for lang, path in [("zh", "search/search_index.json"), ("en", "en/search/search_index.json")]}


def test_each_language_has_its_own_index_with_each_page_once(built_site):
    indexes = _indexes(built_site)
    labs = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    for lang, docs in indexes.items():
        pages = [d["location"] for d in docs if "#" not in d["location"]]
        assert len(pages) == len(set(pages)), f"{lang}: a page is indexed twice"
        assert not [p for p in pages if p.startswith("en/")], f"{lang}: locations must be relative to its root"
        for lab in labs:
            assert pages.count(f"labs/{lab}/") == 1, f"{lang}: lab {lab} is not in the index exactly once"
    zh_text = " ".join(d["title"] for d in indexes["zh"])
    en_text = " ".join(d["title"] for d in indexes["en"] if not d["location"].startswith("labs/"))
    assert "全归约" in zh_text.replace("\u200b", "") and not re.search(r"[\u4e00-\u9fff]", en_text)
    html = (built_site / "en/distributed/nccl-timeout/index.html").read_text(encoding="utf-8")
    assert '"base": "../../../en/"' in html, "an English page must load the English index"


def test_index_text_has_no_page_chrome(built_site):
    for lang, docs in _indexes(built_site).items():
        for d in docs:
            for field in ("title", "text"):
                assert not re.search(r"¶|Copied!|\b(In|Out)\s*\[\s*\d*\s*\]:", d[field]), \
                    f"{lang} {d['location']} {field}: {d[field][:200]}"


def test_index_terms_spellings_abbreviations_and_short_words():
    assert strip_chrome("In\xa0[3]: Copied! x = 1 Out[3]: 2 ¶") == "x = 1 2"
    assert {"specialization", "quantized"} <= set(index_terms("warp specialisation, quantised weights"))
    assert "optimisation" in index_terms("kernel optimization")
    assert "飞行记录器" in index_terms("用 Flight Recorder 对齐")  # the glossary's other language
    assert "TP" in ABBREVIATIONS and "FR" in ABBREVIATIONS
    # 分 begins 分页, a word readers type: alone it is marked, so the query 分页 is not cut to 分*
    assert mark_short_tokens("FP8 \u200b分\u200b E4M3") == "FP8 \u200b分\u2060\u200b E4M3"
    assert mark_short_tokens("\u200b分页\u200b") == "\u200b分页\u200b"


def _results(page, query: str) -> list[str]:
    box = "input.md-search__input"
    page.fill(box, "")
    page.press(box, "End")  # Material searches on keyup
    page.wait_for_function(PLACEHOLDER, timeout=10000)
    page.fill(box, query)
    page.press(box, "End")
    page.wait_for_function(RESULTS, timeout=15000)
    hrefs = page.locator("li.md-search-result__item").evaluate_all(  # one item per page, its first link
        "items => items.map(li => li.querySelector('a.md-search-result__link').href)")
    return [urlparse(h).path for h in hrefs]


@pytest.mark.parametrize("lang, queries", [("zh", ZH_QUERIES), ("en", EN_QUERIES)])
def test_typed_queries_find_the_question_in_the_top_three(browser, site_url, lang, queries):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    root = urlparse(site_url).path + ("en/" if lang == "en" else "")
    page.goto(site_url + ("en/" if lang == "en" else ""), wait_until="networkidle")
    page.click("label.md-header__button[for='__search']") if page.is_visible(
        "label.md-header__button[for='__search']") else page.click("input.md-search__input")
    misses, foreign, twice = [], [], []
    for query, expected in list(queries.items()) + [("GPU", None), ("lab", None)]:
        paths = _results(page, query)
        if expected is not None and root + expected not in paths[:3]:
            misses.append(f"{query!r}: {[p.removeprefix(root) for p in paths[:3]]}")
        foreign += [p for p in paths if p.startswith(urlparse(site_url).path + "en/") != (lang == "en")]
        twice += [p for p in paths if paths.count(p) > 1]
    ctx.close()
    assert not misses, f"{lang}: the question is not in the top three for {len(misses)} queries: {misses}"
    assert not foreign, f"{lang}: results from the other language: {foreign[:5]}"
    assert not twice, f"{lang}: a page (lab) listed twice: {twice[:5]}"
