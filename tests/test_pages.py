"""The question-page contract, on every real page and on broken fixtures."""
import re
import shutil
from pathlib import Path

import pytest

from kb.pages import PageError, check_page, question_pages

ROOT = Path(__file__).resolve().parents[1]
PAGES = question_pages()


def test_there_are_eight_questions_in_two_languages():
    assert len([p for p in PAGES if not p.name.endswith(".en.md")]) >= 8
    assert len(PAGES) % 2 == 0


@pytest.mark.parametrize("path", PAGES, ids=[p.relative_to(ROOT / "docs").as_posix() for p in PAGES])
def test_page_follows_the_contract(path):
    meta = check_page(path)
    assert meta["title"]


@pytest.fixture
def docs(tmp_path):
    """A copy of one good question page and its twin, to break in each test."""
    d = tmp_path / "docs"
    (d / "kernels").mkdir(parents=True)
    src = ROOT / "docs/kernels/fusion-slowdown.md"
    shutil.copy(src, d / "kernels/q.md")
    shutil.copy(src.with_suffix(".en.md"), d / "kernels/q.en.md")
    return d


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"fixture text {old!r} not found in {path.name}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _fails(path, docs, *words):
    with pytest.raises(PageError) as e:
        check_page(path, docs)
    msg = str(e.value)
    assert msg.startswith("docs/kernels/q"), msg
    for w in words:
        assert w in msg, msg


def test_fixture_is_valid(docs):
    check_page(docs / "kernels/q.md", docs)
    check_page(docs / "kernels/q.en.md", docs)


def test_unknown_tag(docs):
    _edit(docs / "kernels/q.md", "tags: [", "tags: [没有这个标签, ")
    _fails(docs / "kernels/q.md", docs, "没有这个标签", "vocabulary")


def test_missing_field_and_extra_field(docs):
    _edit(docs / "kernels/q.md", "difficulty:", "level:")
    _fails(docs / "kernels/q.md", docs, "front matter")


def test_front_matter_not_yaml(docs):
    _edit(docs / "kernels/q.md", "title:", "title: [unclosed\nx:")
    _fails(docs / "kernels/q.md", docs, "not valid YAML")


def test_no_front_matter(docs):
    p = docs / "kernels/q.md"
    p.write_text(p.read_text(encoding="utf-8").split("\n---\n", 1)[1], encoding="utf-8")
    _fails(p, docs, "no front matter")


def test_lab_link_to_missing_notebook(docs):
    p = docs / "kernels/q.md"
    text = p.read_text(encoding="utf-8")
    p.write_text(re.sub(r"^labs: .*$", "labs: [notebooks/99-missing-lab.ipynb]", text, count=1, flags=re.M),
                 encoding="utf-8")
    _fails(p, docs, "notebooks/99-missing-lab.ipynb", "does not exist")


def test_sections_out_of_order(docs):
    _edit(docs / "kernels/q.md", "## 追问", "## 随便聊聊")
    _fails(docs / "kernels/q.md", docs, "sections must be")


def test_lab_marker_missing(docs):
    _edit(docs / "kernels/q.md", "<!-- lab-cards -->", "")
    _fails(docs / "kernels/q.md", docs, "lab-cards")


def test_snippet_included_outside_a_code_fence(docs):
    _edit(docs / "kernels/q.md", "## 追问", '--8<-- "ceilings/bandwidth.py:copy"\n\n## 追问')
    _fails(docs / "kernels/q.md", docs, "not inside a code fence")


def test_code_typed_into_a_page(docs):
    _edit(docs / "kernels/q.md", "## 追问", "```python\nprint('untested')\n```\n\n## 追问")
    _fails(docs / "kernels/q.md", docs, "typed into the page")


def test_english_twin_must_translate_tags(docs):
    p = docs / "kernels/q.en.md"
    p.write_text(re.sub(r"^tags: \[([^,\]]+)", r"tags: [Inference", p.read_text(encoding="utf-8"), count=1,
                        flags=re.M), encoding="utf-8")
    _fails(p, docs, "translation of its Chinese twin")


def test_missing_twin(docs):
    (docs / "kernels/q.en.md").unlink()
    _fails(docs / "kernels/q.md", docs, "twin", "missing")


# What a page uses must be what it lists, and what it quotes must be verified and fresh.

def test_quoting_a_lab_it_does_not_list(docs):
    _edit(docs / "kernels/q.md", "## 实验\n", "## 实验\n\n见 <!-- metric 04-inference-serving spec_decode_speedup -->。\n")
    _fails(docs / "kernels/q.md", docs, "quotes <!-- metric 04-inference-serving spec_decode_speedup -->",
           "notebooks/04-inference-serving.ipynb", "does not list")


def test_including_a_labs_snippet_it_does_not_list(docs):
    _edit(docs / "kernels/q.md", "## 实验\n", '## 实验\n\n```python\n--8<-- "inference/paged_kv/attention.py:launch"\n```\n')
    _fails(docs / "kernels/q.md", docs, "includes inference/paged_kv/attention.py,",
           "notebooks/03-inference-paged-kv.ipynb")


def test_a_malformed_shortcode_names_the_line(docs):
    _edit(docs / "kernels/q.md", "## 实验\n", "## 实验\n\n<!-- metric 02-kernel-fusion -->\n")
    _fails(docs / "kernels/q.md", docs, "wants <!-- metric NN-lab-stem metric_name")


def test_a_number_typed_into_prose_needs_a_citation(docs):
    _edit(docs / "kernels/q.md", "## 实验\n", "## 实验\n\nH200 的拷贝带宽是 4,800 GB/s。\n")
    _fails(docs / "kernels/q.md", docs, "measured-looking", "'4,800 GB/s'")


@pytest.mark.parametrize("text, kind", [
    ("融合版比 eager 快 30%。", "ratio"),
    ("实测融合版比 torch.compile 快。", "conclusion"),
    ("在 H200 上，手写反向输给 torch.compile。", "conclusion"),
    ("| 行归约 | 本站实测快于手写版 |", "conclusion"),
])
def test_a_comparison_of_measurements_is_quoted_or_cited(docs, text, kind):
    _edit(docs / "kernels/q.md", "## 实验\n", f"## 实验\n\n{text}\n")
    _fails(docs / "kernels/q.md", docs, f"({kind})", "comparison(s) of measurements")


@pytest.mark.parametrize("text", [
    "实测融合版比 torch.compile 快 <!-- metric 02-kernel-fusion add_layernorm_fwd_speedup_vs_compile -->。",
    "实测融合版比 torch.compile 快。\n同一形状上它是 <!-- metric 02-kernel-fusion add_layernorm_fwd_speedup_vs_compile -->。",
    "| 行归约 | 本站实测快于手写版 |\n| 数字 | <!-- metric 02-kernel-fusion add_layernorm_fwd_speedup_vs_compile --> |",
    "论文里融合版比 eager 快 30%[^1]。",
    "实测带宽见下表。",
    "融合为什么会变慢，见下一节。",
])
def test_a_quoted_cited_or_plain_sentence_passes(docs, text):
    _edit(docs / "kernels/q.md", "## 实验\n", f"## 实验\n\n{text}\n")
    check_page(docs / "kernels/q.md", docs)


def test_an_english_conclusion_from_the_lab_needs_its_quote(docs):
    _edit(docs / "kernels/q.en.md", "## Lab\n", "## Lab\n\nMeasured here, the fused kernel beats cuBLAS.\n")
    with pytest.raises(PageError, match=r"\(conclusion\): 'Measured here, the fused kernel beats cuBLAS.'"):
        check_page(docs / "kernels/q.en.md", docs)


def test_quoting_a_stale_result_passes_the_contract_but_not_the_publishing_gate(docs, tmp_path, monkeypatch):
    from kb import freshness, results

    copy = tmp_path / "results"
    shutil.copytree(ROOT / "results", copy)
    data = (copy / "nvidia-h200/02-kernel-fusion.json").read_text()
    first_hash = re.search(r'"snippets/fusion/add_layernorm.py": "([0-9a-f]{64})"', data).group(1)
    (copy / "nvidia-h200/02-kernel-fusion.json").write_text(data.replace(first_hash, "0" * 64))
    monkeypatch.setattr(results, "RESULTS", copy)
    _edit(docs / "kernels/q.md", "## 实验\n", "## 实验\n\n<!-- metric 02-kernel-fusion add_layernorm_fwd_speedup_vs_eager -->\n")
    check_page(docs / "kernels/q.md", docs)  # stale is a state: the page still checks out
    line = (docs / "kernels/q.md").read_text().splitlines().index(
        "<!-- metric 02-kernel-fusion add_layernorm_fwd_speedup_vs_eager -->") + 1
    problems = freshness.publish_problems(docs)
    assert f"docs/kernels/q.md:{line}: quotes add_layernorm_fwd_speedup_vs_eager from 02-kernel-fusion " \
           "(stale, nvidia-h200)" in problems, problems
    assert any(p.startswith("02-kernel-fusion on nvidia-h200: stale") and "snippets/fusion/add_layernorm.py" in p
               for p in problems), problems


def test_quoting_a_metric_the_result_lacks_or_a_gpu_without_results(docs):
    _edit(docs / "kernels/q.md", "## 实验\n", "## 实验\n\n<!-- metric 02-kernel-fusion no_such_metric -->\n")
    _fails(docs / "kernels/q.md", docs, "has no metric 'no_such_metric'")
    _edit(docs / "kernels/q.md", "no_such_metric", "add_layernorm_fwd_speedup_vs_eager gpu=nvidia-a100")
    _fails(docs / "kernels/q.md", docs, "has no result for GPU nvidia-a100")


def test_two_sentences_on_one_line_fail(docs):
    _edit(docs / "kernels/q.en.md", "## Lab\n", "## Lab\n\nThe first sentence. The second one.\n")
    with pytest.raises(PageError, match=r"docs/kernels/q.en.md:\d+: more than one sentence on a line"):
        check_page(docs / "kernels/q.en.md", docs)


def test_a_short_answer_longer_than_thirty_seconds_fails(docs):
    long = "这是一句很长的回答，" * 20 + "结束。\n"
    _edit(docs / "kernels/q.md", "## 面试回答\n", long + "\n## 面试回答\n")
    _fails(docs / "kernels/q.md", docs, "30-second answer", "at most 130")


def test_spoken_length_counts_characters_and_words_not_markup():
    from kb.prose import spoken_length
    assert spoken_length("NCCL 超时[^a]是 [watchdog](https://x.org/a/b/c) 报的 <!-- metric 00-a b -->。") == 7
    assert spoken_length("An NCCL timeout is raised by the watchdog, $t = 600$ s.") == 9
