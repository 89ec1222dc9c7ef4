"""What the reader sees of a result (kb/render.py): tables, provenance, flags; data is escaped."""
from pathlib import Path

from kb import render
from kb.results import Result

DATA = {"metrics": {"a_gbps": 4321.0}, "labels": {"a_gbps": {"unit": "GB/s", "zh": "带宽", "en": "Band|width <b>"}},
        "device": {"name": "NVIDIA H200", "count": 1, "driver": "580", "cuda": "13.0", "torch": "2.11",
                   "triton": "3.6.0"}, "executed_at": "2026-11-30T00:00:00Z", "lab_mode": "full",
        "commit": "c9ce68d23cac7ba663fefe13b8c991368a1eb5ba",
        "tables": {"sweep": {"columns": ["bytes", "<i>GB/s</i>"], "rows": [[1048576.0, 431.16], [2.0, 0.5]],
                             "zh": "扫描", "en": "Sweep"}}}


def result(stale=(), legacy=False):
    return Result(Path("results/nvidia-h200/00-x.json"), DATA, list(stale), legacy)


def test_metrics_table_in_both_languages_escapes_data():
    assert "| 带宽 | 4,321 GB/s |" in render.metrics_table(result(), "zh")
    assert "| Band&#124;width &lt;b&gt; | 4,321 GB/s |" in render.metrics_table(result(), "en")


def test_provenance_names_gpu_commit_and_state():
    line = render.provenance(result(), "en")
    assert "NVIDIA H200" in line and "commit c9ce68d23c" in line and "matches the current code" in line
    assert "stale (changed since the run: snippets/x.py)" in render.provenance(result(stale=["snippets/x.py"]), "en")
    assert "运行后已变更：snippets/x.py" in render.provenance(result(stale=["snippets/x.py"]), "zh")
    many = render.provenance(result(stale=["a.py", "b.py", "c.py", "d.py"]), "en")
    assert "a.py, b.py, c.py …" in many and "d.py" not in many
    assert "recorded before commits were kept" in render.provenance(result(legacy=True), "en")


def test_data_tables_are_collapsible_and_escaped():
    md = render.data_tables(result(), "en")
    assert md.startswith('??? info "Sweep"') and "    | 1,048,576 | 431.2 |" in md and "&lt;i&gt;GB/s" in md


def test_freshness_table_has_a_row_per_lab_with_its_state():
    from kb.freshness import lab_states

    states = lab_states()
    table = render.freshness_table("en", ".")
    rows = [ln for ln in table.splitlines()[2:]]
    assert len(rows) == len(states) == len(list((render.ROOT / "notebooks").glob("*.ipynb")))
    for s, row in zip(states, rows):
        assert row.startswith(f"| [{render.md_text(s.stem)}](labs/{s.stem}.ipynb) |"), row
        words = {"fresh": "| fresh |", "stale": "| stale · changed since the run: ", "missing": "| no GPU result yet |",
                 "legacy": "| recorded before commits were kept |"}[s.state]
        assert words in row, row
        if s.result is not None:
            assert f"| {s.result.data['executed_at'][:10]} |" in row
        for f in s.changed:
            assert render.md_text(f) in row
    assert render.freshness_table("zh", "a").splitlines()[0] == "| 实验 | GPU | 状态 | 提交 | 记录日期 | 用时（秒） |"
