"""snippets/common: the record every lab publishes through, the environment, timing, recorded tables."""
import json
import math

import pytest
import torch

from kb import results as recorded
from snippets.common import record
from snippets.common.env import environment, gpu_slug
from snippets.common.timing import bench_ms


@pytest.fixture
def fresh_record(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "_state", {"metrics": {}, "labels": {}, "tables": {}})
    monkeypatch.setenv("KB_RECORD_PATH", str(tmp_path / "rec.json"))
    return tmp_path / "rec.json"


def test_metric_and_table_are_written_with_the_snippets_in_use(fresh_record):
    record.metric("copy_gbps", 1234.5, "GB/s", zh="拷贝带宽", en="Copy bandwidth")
    record.table("sweep", ["bytes", "GB/s"], [[1024, 1.5], [2048, 2.5]], zh="扫描", en="Sweep")
    data = json.loads(fresh_record.read_text())
    assert data["metrics"] == {"copy_gbps": 1234.5}
    assert data["labels"]["copy_gbps"] == {"unit": "GB/s", "zh": "拷贝带宽", "en": "Copy bandwidth"}
    assert data["tables"]["sweep"]["rows"] == [[1024.0, 1.5], [2048.0, 2.5]]
    assert "snippets/common/record.py" in data["modules"]


@pytest.mark.parametrize("name, value", [("Bad Name", 1.0), ("ok_name", math.nan), ("ok", math.inf)])
def test_metric_rejects_bad_names_and_values(fresh_record, name, value):
    with pytest.raises(ValueError):
        record.metric(name, value, "x", zh="x", en="x")


def test_table_rejects_ragged_rows(fresh_record):
    with pytest.raises(ValueError, match="every row"):
        record.table("t", ["a", "b"], [[1, 2], [3]], zh="t", en="t")


def test_environment_on_cpu():
    env = environment()
    assert env["torch"] == torch.__version__
    if not torch.cuda.is_available():
        assert env["count"] == 0 and env["name"].startswith("CPU")


def test_gpu_slug():
    assert gpu_slug("NVIDIA H200") == "nvidia-h200"
    assert gpu_slug("Tesla T4") == "tesla-t4"
    assert gpu_slug("NVIDIA A100-SXM4-80GB") == "nvidia-a100-sxm4-80gb"
    for name in ("NVIDIA H200", "CPU (x86_64)", "Tesla T4", "NVIDIA A100-SXM4-80GB"):
        assert recorded.gpu_slug(name) == gpu_slug(name)  # kb keeps a copy, since it does not import snippets


def test_bench_ms_measures_time():
    import time
    ms = bench_ms(lambda: time.sleep(0.01), "cpu", cpu_reps=3)
    assert 9 < ms < 200


def test_recorded_tables_render_both_languages():
    data = {"metrics": {"a_gbps": 4321.0}, "labels": {"a_gbps": {"unit": "GB/s", "zh": "带宽", "en": "Bandwidth"}},
            "device": {"name": "NVIDIA H200", "count": 1, "driver": "580", "cuda": "13.0", "torch": "2.11",
                       "triton": "3.6.0"}, "executed_at": "2026-11-30T00:00:00Z", "lab_mode": "full"}
    assert "| 带宽 | 4,321 GB/s |" in recorded.metrics_table(data, "zh")
    assert "| Bandwidth | 4,321 GB/s |" in recorded.metrics_table(data, "en")
    assert "NVIDIA H200" in recorded.provenance(data, "en", fresh=False)
    assert "stale" in recorded.provenance(data, "en", fresh=False)


@pytest.mark.parametrize("have, need, ok", [
    (None, None, True), (None, "8.0", False), ((7, 5), "8.0", False), ((8, 0), "8.0", True),
    ((9, 0), "8.0", True), ((9, 0), "9.0a", True), ((10, 0), "9.0a", False), ((8, 9), "9.0a", False),
])
def test_capability_rules(have, need, ok):
    from snippets.common.hardware import capability_ok
    assert capability_ok(have, need) is ok


def test_unmet_needs_are_explained():
    from snippets.common.hardware import unmet
    assert unmet() is None
    if not torch.cuda.is_available():
        assert unmet(gpus=2) == "needs 2 GPU(s), this machine has 0"
        assert unmet(capability="9.0a") == "needs sm_90a, this machine has no GPU"


def test_metric_is_printed_in_plain_python(fresh_record, capsys):
    record.metric("x_gbps", 1234.5678, "GB/s", zh="带宽", en="Bandwidth")
    assert capsys.readouterr().out == "Bandwidth: 1235 GB/s\n"


def test_metric_is_displayed_machine_readable_under_ipython(fresh_record, monkeypatch):
    import IPython
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    record.metric("x_gbps", 1234.5678, "GB/s", zh="带宽", en="Bandwidth")
    assert shown == [({"application/vnd.kb.metric+json": {"name": "x_gbps", "value": 1234.5678, "unit": "GB/s"},
                       "text/plain": "Bandwidth: 1235 GB/s"}, True)]


def test_recorded_data_tables_are_collapsible_markdown():
    data = {"tables": {"sweep": {"columns": ["bytes", "GB/s"], "rows": [[1048576.0, 431.16], [2.0, 0.5]],
                                 "zh": "扫描", "en": "Sweep"}}}
    md = recorded.data_tables(data, "en")
    assert md.startswith('??? info "Sweep"') and "    | 1,048,576 | 431.2 |" in md and "    | 2 | 0.5 |" in md
