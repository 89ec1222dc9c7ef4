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


# ---------------------------------------------------------------- snippets/common/timing.py and checks.py

def test_host_ms_is_a_positive_median_and_runs_the_warmup_first():
    import time

    from snippets.common.timing import host_ms
    calls = []
    ms = host_ms(lambda: (calls.append(1), time.sleep(0.002)), reps=3, warmup=2)
    assert ms > 0 and len(calls) == 5


def test_timed_call_returns_the_result_and_seconds():
    from snippets.common.timing import timed_call
    out, seconds = timed_call(lambda: 41 + 1)
    assert out == 42 and seconds >= 0


def test_graphed_on_the_cpu_is_the_function_itself():
    from snippets.common.timing import graphed, replay_ms
    fn = lambda: 7  # noqa: E731
    assert graphed(fn, "cpu") is fn and replay_ms(fn, "cpu") >= 0


@pytest.mark.parametrize("nbytes, l2, copies", [(33_500_000, 50_000_000, 6), (470_000_000, 50_000_000, 2),
                                                (1000, 60_000_000, 240_000), (33_500_000, None, 1)])
def test_rotating_buffers_exceed_the_l2(nbytes, l2, copies):
    from snippets.common.timing import copies_for, rotating
    assert copies_for(nbytes, l2) == copies
    if copies < 100:
        bufs = rotating(lambda: torch.empty(0), nbytes, l2)
        assert len(bufs) == copies and len({id(b) for b in bufs}) == copies
    if l2:
        assert copies * nbytes >= 4 * l2


def test_l2_size_comes_from_the_device_properties(monkeypatch):
    from types import SimpleNamespace

    from snippets.common.timing import l2_bytes
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(L2_cache_size=123))
    assert l2_bytes("cuda") == 123 and l2_bytes("cpu") is None


def test_fresh_seeds_differ():
    from snippets.common.checks import fresh_seed
    seeds = {fresh_seed() for _ in range(8)}
    assert len(seeds) > 1 and all(0 <= s < 2**31 for s in seeds)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.int32])
def test_poisoned_outputs_are_nan_or_the_sentinel(dtype):
    from snippets.common.checks import INT_SENTINEL, empty, poisoned_empty, poisoned_outputs
    t = poisoned_empty((3, 4), dtype, "cpu")
    assert t.isnan().all() if dtype.is_floating_point else (t == INT_SENTINEL).all()
    with poisoned_outputs():
        with poisoned_outputs():
            pass
        u = empty((5,), dtype, "cpu")  # still poisoned after the inner block
    assert u.isnan().all() if dtype.is_floating_point else (u == INT_SENTINEL).all()


def test_a_kernel_that_skips_part_of_its_output_is_caught():
    from snippets.common.checks import assert_close, empty, poisoned_outputs

    def lazy_double(x):  # "forgets" the last row, as a kernel with a wrong grid would
        out = empty(x.shape, x.dtype, x.device)
        out[:-1] = 2 * x[:-1]
        return out
    x = torch.randn(4, 3)
    with poisoned_outputs():
        got = lazy_double(x)
    with pytest.raises(AssertionError, match=r"lazy_double: 3 of 12 elements off .* first at \(3, 0\): nan"):
        assert_close(got, 2 * x.double(), rtol=1e-6, what="lazy_double")


def test_assert_close_names_what_was_compared_and_passes_within_tolerance():
    from snippets.common.checks import assert_close, max_rel_error, rel_error
    want = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64)
    got = want.float() * (1 + 1e-7)
    assert_close(got, want, rtol=1e-6, what="scaled")
    with pytest.raises(AssertionError, match="^bias grad: 1 of 3 elements off"):
        assert_close(want + torch.tensor([0.0, 0.0, 0.1]), want, rtol=1e-3, atol=1e-3, what="bias grad")
    with pytest.raises(AssertionError, match="^y: shape"):
        assert_close(want[:2], want, rtol=1, what="y")
    assert max_rel_error(want + torch.tensor([0.0, 0.4, 0.0]), want) == pytest.approx(0.1)
    assert rel_error(want, want) == 0.0
    assert math.isnan(max_rel_error(torch.tensor([math.nan, 0, 0]), want))
