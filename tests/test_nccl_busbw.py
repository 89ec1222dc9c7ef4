"""busbw formulas against hand computations, and the gloo sweep on the CPU (world 2, tiny sizes)."""
import os

import pytest

from snippets.nccl import busbw


SMALL = [8, 256, 4096]


@pytest.mark.parametrize("n, all_reduce, one_way", [(2, 1.0, 0.5), (4, 1.5, 0.75), (8, 1.75, 0.875)])
def test_factors_by_hand(n, all_reduce, one_way):
    assert busbw.bus_factor("all_reduce", n) == all_reduce           # 2(n-1)/n
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert busbw.bus_factor(op, n) == one_way                    # (n-1)/n
    assert busbw.bus_factor("broadcast", n) == busbw.bus_factor("reduce", n) == 1.0


def test_bandwidths_by_hand():
    # all_reduce of 1 GiB in 10 ms on 8 ranks: algbw = 2^30 B / 0.01 s, busbw = algbw * 14/8
    assert busbw.algbw_gbps(2**30, 0.01) == pytest.approx(107.3741824)
    assert busbw.busbw_gbps("all_reduce", 2**30, 0.01, 8) == pytest.approx(187.9048192)
    # all_gather on 4 ranks, 2^20 float32 per rank: S = 2^20 * 4 ranks * 4 B = 16 MiB, in 1 ms
    s = 2**20 * 4 * 4
    assert busbw.algbw_gbps(s, 1e-3) == pytest.approx(16.777216)
    assert busbw.busbw_gbps("all_gather", s, 1e-3, 4) == pytest.approx(12.582912)
    assert busbw.busbw_gbps("reduce_scatter", s, 1e-3, 4) == pytest.approx(12.582912)
    assert busbw.busbw_gbps("broadcast", 10**9, 0.5, 8) == pytest.approx(2.0)


# Bytes each rank puts on its link in the ring algorithms, counted from the algorithm, not the factor:
# all_reduce = reduce_scatter + all_gather, 2(n-1) chunks of S/n; the others (n-1) chunks of S/n.
RING_CHUNKS = {"all_reduce": lambda n: 2 * (n - 1), "all_gather": lambda n: n - 1,
               "reduce_scatter": lambda n: n - 1, "all_to_all": lambda n: n - 1}


@pytest.mark.parametrize("op", sorted(RING_CHUNKS))
def test_busbw_is_the_link_rate_whatever_n(op):
    link, size = 450.0, 2**28  # GB/s of a made-up link, bytes
    for n in (2, 3, 4, 8, 16, 64):
        seconds = RING_CHUNKS[op](n) * (size / n) / (link * 1e9)
        assert busbw.busbw_gbps(op, size, seconds, n) == pytest.approx(link)


def test_names_and_errors():
    assert busbw.canonical("AllReduce") == busbw.canonical("all-reduce") == "all_reduce"
    assert busbw.canonical("alltoall") == "all_to_all"
    with pytest.raises(ValueError, match="unknown collective"):
        busbw.bus_factor("all_scatter", 2)
    with pytest.raises(ValueError):
        busbw.bus_factor("all_reduce", 0)


def test_sizes_round_to_whole_elements_per_rank():
    assert busbw.numels("all_gather", 8, 2, 4) == (1, 2, 8)
    assert busbw.numels("reduce_scatter", 12, 2, 4) == (2, 1, 8)   # 3 floats -> 2, one per rank
    assert busbw.numels("all_reduce", 8, 4, 4) == (2, 2, 8)
    assert busbw.size_range(8, 64) == [8, 16, 32, 64]
    assert busbw.size_range(8, 1 << 30)[-1] == 1 << 30
    assert busbw.size_range(8, 1 << 30, 4)[-2:] == [1 << 29, 1 << 30]   # 8 * 4^k skips 1 GiB


def _check_rows(op, rows, world=2):
    assert [r.bytes for r in rows] == [busbw.numels(op, s, world, 4)[2] for s in SMALL]
    for r in rows:
        assert r.time_us > 0
        assert r.algbw_GBps == pytest.approx(r.bytes / (r.time_us * 1e-6) / 1e9)
        assert r.busbw_GBps == pytest.approx(r.algbw_GBps * busbw.bus_factor(op, world))


def test_gloo_sweep_spawn():
    """The path users take: spawned ranks, the three collectives of the lab in one process group."""
    res = busbw.sweep_all(["all_reduce", "all_gather", "reduce_scatter"], SMALL, 2, "gloo",
                          warmup=1, trials=3, max_iters=10, target_bytes=1 << 14, timeout_s=30)
    assert list(res) == ["all_reduce", "all_gather", "reduce_scatter"]
    for op, rows in res.items():
        _check_rows(op, rows)


def test_gloo_sweep_other_ops_and_nvls_env(monkeypatch):
    orig = busbw.RUN["all_to_all"]

    def spy(send, recv):
        assert os.environ.get("NCCL_NVLS_ENABLE") == "0"
        orig(send, recv)

    monkeypatch.setitem(busbw.RUN, "all_to_all", spy)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    for op in ("all_to_all", "broadcast"):
        rows = busbw.sweep(op, SMALL, 2, "gloo", warmup=1, trials=2, max_iters=5, timeout_s=30,
                           start_method="fork")
        _check_rows(op, rows)


def _wrong_sum(send, recv):
    import torch.distributed as dist
    dist.all_reduce(recv)
    if dist.get_rank() == 1:
        recv[0] += 1e-3


def _skip_gather(send, recv):
    pass  # leaves the NaN poison in recv


@pytest.mark.parametrize("op, broken", [("all_reduce", _wrong_sum), ("all_gather", _skip_gather)])
def test_check_catches_a_wrong_result(monkeypatch, op, broken):
    monkeypatch.setitem(busbw.RUN, op, broken)  # inherited by the forked ranks
    with pytest.raises(Exception, match=rf"{op} of 8 B: wrong result on 1 of 2 ranks"
                       if op == "all_reduce" else rf"{op} of 8 B: wrong result on 2 of 2 ranks"):
        busbw.sweep(op, [8], 2, "gloo", warmup=1, trials=1, timeout_s=30, start_method="fork")


def test_nccl_needs_gpus():
    import torch
    if torch.cuda.device_count() >= 2:
        pytest.skip("this machine has the GPUs")
    with pytest.raises(RuntimeError, match="needs 2 GPUs"):
        busbw.sweep("all_reduce", [8], 2, "nccl")


def test_plot():
    import matplotlib.pyplot as plt

    rows = {op: [busbw.Row(s, 10.0 + s / 1e3, s / 1e4, s / 1e4 * busbw.bus_factor(op, 2)) for s in [8, 1 << 20, 1 << 30]]
            for op in ("all_reduce", "all_gather", "reduce_scatter")}
    fig = busbw.plot(rows, nominal_GBps=300.0, nominal_label="made-up link")
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["all_reduce", "all_gather", "reduce_scatter", "made-up link: 300 GB/s"]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert list(ax.get_lines()[-1].get_ydata()) == [300.0, 300.0]
    assert "busbw" in ax.get_ylabel()
    assert fig.number not in plt.get_fignums()
