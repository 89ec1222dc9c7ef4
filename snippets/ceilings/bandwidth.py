"""Device-to-device copy bandwidth: the memory ceiling.

Bytes moved count a read of the source plus a write of the destination (2 x size). On a GPU,
`bench_ms` (triton's do_bench) flushes the L2 before every run, so every size is read from device
memory. `warm_l2=True` instead times copies queued back to back with no flush, so a pair of
buffers that fits in the L2 stays there and the curve shows the L2.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from snippets.common.checks import poisoned_empty
from snippets.common.timing import bench_ms, events_ms, l2_bytes


def back_to_back_ms(fn, reps: int = 50, trials: int = 5) -> float:
    """Median per-call milliseconds of `reps` calls queued back to back on the current CUDA stream.

    A spin kernel holds the stream while the host queues the calls, so launch cost stays out of
    the time. (A CUDA graph would cut the gaps further, but replayed copy nodes of 512 MiB and
    more ran a third slower than plain copies on an H200, which would bend the curve.)
    """
    hold = lambda: torch.cuda._sleep(5_000_000)  # noqa: E731  cycles: a few ms, longer than queueing `reps` calls
    return events_ms(fn, trials=trials, calls=reps, warmup=1, before=hold)


def copy_bandwidth_gbps(nbytes: int, device: str, warm_l2: bool = False, copy=torch.Tensor.copy_) -> float:
    """GB/s of `copy(dst, src)` for float32 buffers of `nbytes`, after checking the copy is exact."""
    n = nbytes // 4
    src = torch.randn(n, device=device)
    dst = poisoned_empty(src.shape, src.dtype, device)  # an element the copy skips stays NaN
    copy(dst, src)
    assert torch.equal(dst, src), f"copy of {nbytes} bytes is wrong"

    if warm_l2 and device.startswith("cuda"):
        ms = back_to_back_ms(lambda: copy(dst, src))
    else:
        ms = bench_ms(lambda: copy(dst, src), device)
    return 2 * n * 4 / (ms * 1e-3) / 1e9


def copy_sweep(sizes: list[int], device: str) -> list[list[float]]:
    """Rows of [bytes, GB/s with the L2 flushed, GB/s with the L2 warm]."""
    return [[b, copy_bandwidth_gbps(b, device), copy_bandwidth_gbps(b, device, warm_l2=True)] for b in sizes]


def l2_cache_bytes(device: str) -> int | None:
    return l2_bytes(device)


def hbm_bandwidth_gbps(rows: list[list[float]], l2_bytes: int | None) -> float:
    """Best L2-flushed bandwidth among sizes of at least 4x the L2 (the largest size if none is)."""
    big = [gbps for b, gbps, _ in rows if l2_bytes is None or b >= 4 * l2_bytes]
    return max(big) if big else rows[-1][1]


def plot_copy_sweep(rows: list[list[float]], l2_bytes: int | None = None):
    """GB/s against buffer size (log x), both L2 modes; a dotted line where src + dst fill the L2."""
    sizes = [r[0] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(sizes, [r[1] for r in rows], "o-", label="L2 flushed before each copy")
    ax.plot(sizes, [r[2] for r in rows], "s--", label="L2 warm (copies back to back)")
    if l2_bytes:
        ax.axvline(l2_bytes / 2, color="gray", linestyle=":", label="src + dst = L2 size")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("buffer size (bytes); traffic = 2 x size")
    ax.set_ylabel("GB/s")
    ax.set_title("Device-to-device copy bandwidth")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    plt.close(fig)  # the caller displays the returned figure; pyplot must not show it a second time
    return fig
