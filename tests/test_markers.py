"""The shortcode grammar (kb/markers.py) and the check for numbers typed into prose (kb/prose.py)."""
import pytest

from kb import markers, prose


def test_every_shortcode_parses_with_its_arguments():
    text = ("a <!-- metric 02-kernel-fusion fused_speedup --> b\n"
            "<!-- metric 00-gpu-ceilings ridge_point_flop_per_byte % gpu=nvidia-h100 -->\n"
            "<!-- lab-cards -->\n<!-- glossary -->\n<!-- an ordinary comment -->\n")
    found = markers.find(text, "docs/x.md")
    assert [m.name for m in found] == ["metric", "metric", "lab-cards", "glossary"]
    assert found[1].args == ("00-gpu-ceilings", "ridge_point_flop_per_byte", "%")
    assert found[1].options == {"gpu": "nvidia-h100"} and found[1].line == 2
    assert found[0].lab == "notebooks/02-kernel-fusion.ipynb"


@pytest.mark.parametrize("bad, why", [
    ("<!-- metric 02-kernel-fusion -->", "wants"),
    ("<!-- metric fusion fused_speedup -->", "wants"),
    ("<!-- metric 02-kernel-fusion Fused -->", "wants"),
    ("<!-- metric 02-kernel-fusion a % % -->", "once"),
    ("<!-- metric 02-kernel-fusion a % colour=red -->", "gpu="),
    ("<!-- metric 02-kernel-fusion a gpu=NVIDIA_H200 -->", "gpu="),
    ("<!-- lab-cards notebooks/00-gpu-ceilings.ipynb -->", "no arguments"),
    ("<!-- glossary all -->", "no arguments"),
])
def test_a_malformed_shortcode_names_file_and_line(bad, why):
    with pytest.raises(markers.MarkerError, match=rf"docs/x.md:3: .*{why}"):
        markers.find(f"one\ntwo\n{bad}\n", "docs/x.md")


def test_shortcodes_in_code_fences_are_code():
    text = "```html\n<!-- metric 02-kernel-fusion -->\n```\n<!-- lab-index -->"
    assert [m.name for m in markers.find(text, "x")] == ["lab-index"]


def test_replace_renders_known_shortcodes_and_leaves_the_rest():
    text = "x <!-- metric 02-kernel-fusion a --> y <!-- lab-cards --> <!-- note -->"
    out = markers.replace(text, "x", {"metric": lambda m: m.args[1].upper()})
    assert out == "x A y <!-- lab-cards --> <!-- note -->"


@pytest.mark.parametrize("line", [
    "H200 的带宽是 4.8 TB/s。", "It ran at 989.5 TFLOP/s on the chip.", "the step took 3.3 ms here",
    "fusion was 1.97× faster.", "a 12 µs launch", "about 2.5x slower", "between 3.0–4.1 TB/s",
    "fused 1,347 TFLOP/s", "它快了 50×，因为",
])
def test_a_measured_looking_number_without_a_citation_is_found(line):
    assert prose.uncited(line + "\n", "References"), line


@pytest.mark.parametrize("line", [
    "H200 的带宽是 4.8 TB/s[^h200]。", "It ran at 989.5 TFLOP/s ([datasheet](https://nvidia.com/x)).",
    "A 4096 × 4096 matrix and an 8 x 8 tile.", "the call `sleep(3 ms)` in code", "$t = 3\\,ms$ in maths",
    "<!-- metric 02-kernel-fusion fused_speedup --> faster", "[^h200]: NVIDIA, 4.8 TB/s, https://nvidia.com",
    "```text\n4.8 TB/s\n```", "It ran at 4.8 TB/s.[^h200] Then more.",
])
def test_cited_or_non_prose_numbers_pass(line):
    assert prose.uncited(line + "\n", "References") == [], line


def test_the_citation_must_be_in_the_same_sentence():
    hits = prose.uncited("It reads 4.8 TB/s[^a]. It writes 3.3 TB/s.\n", "References")
    assert hits == [(1, "3.3 TB/s")]


def test_the_references_section_is_not_prose():
    assert prose.uncited("text\n## References\n1. NVIDIA, 4.8 TB/s\n", "References") == []


def test_abbreviations_and_words_are_not_sentence_ends_or_units():
    assert prose.uncited("Peaks differ, i.e. 4.8 TB/s on H200[^a].\n", "References") == []
    assert prose.uncited("In step 1 uses of the TMA unit start.\n", "References") == []


def test_two_sentences_on_one_line_are_found_but_lists_and_abbreviations_are_not():
    body = ("一句话。第二句话。\n- 列表项。\n1. First item. Second sentence.\nOne, e.g. this, stays.\n"
            "| 表格。 | 单元格。 |\n## References\nA. B. C.\n")
    assert prose.crowded_lines(body, "References") == [1, 3]
