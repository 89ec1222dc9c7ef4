"""How every lab times its code. Each function is one way to measure, and says when to use it.

    do_bench_ms   triton's do_bench: CUDA events around each call, the L2 flushed before each; the default
    events_ms     CUDA events around calls queued back to back, nothing flushed: the caller sets the L2 state
    host_ms       the host clock (perf_counter), GPU synchronised: the CPU, or loops whose host time counts
    graphed       a CUDA graph of a call, so a short kernel is not timed as Python's launch overhead
    rotating      enough copies of an input to outgrow the L2, so each call reads from HBM without a flush
    flush_l2      overwrite the L2 explicitly, as do_bench does before each call
"""
from __future__ import annotations

import math
import statistics
import time


def is_cuda(device) -> bool:
    """The labs pass devices as strings or torch.device; both start with 'cuda' on a GPU."""
    return str(device).startswith("cuda")


def sync(device) -> None:
    """Wait for queued GPU work, so a host clock read after it includes that work."""
    if is_cuda(device):
        import torch
        torch.cuda.synchronize()


def do_bench_ms(fn, warmup_ms: float = 25, rep_ms: float = 100) -> float:
    """Median ms of fn() by triton.testing.do_bench: CUDA events per call, L2 flushed before each call."""
    from triton.testing import do_bench
    return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")


def events_ms(fn, trials: int = 50, calls: int = 1, warmup: int = 3, before=None) -> float:
    """Median ms per call of `calls` back-to-back calls between two CUDA events, per trial; nothing flushed.

    before(), if given, runs just ahead of the start event: a barrier, or a spin kernel that holds the stream
    while the host queues the calls so that launch cost stays out of the time."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if before is not None:
            before()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def timed_call(fn, device="cpu"):
    """(fn()'s result, its wall seconds), the GPU synchronised before and after: one end-to-end run."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def host_ms(fn, reps: int = 5, warmup: int = 1, device="cpu", before=None) -> float:
    """Median ms of fn() by the host clock: the CPU path, or a loop whose host overhead is part of the cost."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if before is not None:
            before()
        times.append(timed_call(fn, device)[1] * 1e3)
    return statistics.median(times)


def bench_ms(fn, device, warmup_ms: float = 25, rep_ms: float = 100, cpu_reps: int = 5) -> float:
    """Median ms of fn(): do_bench on a GPU (L2 flushed before every run), the host clock on the CPU."""
    if is_cuda(device):
        return do_bench_ms(fn, warmup_ms, rep_ms)
    return host_ms(fn, reps=cpu_reps, warmup=1)


def graphed(fn, device):
    """fn captured in a CUDA graph; the returned function replays it and returns the captured output.

    Serving engines run decode steps this way: a step of a few microseconds would otherwise time Python's
    launch overhead, not the GPU. On the CPU fn itself is returned."""
    if not is_cuda(device):
        return fn
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # compile and warm up outside the capture
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay():
        graph.replay()
        return out
    return replay


def replay_ms(fn, device) -> float:
    """bench_ms of fn's CUDA graph replay: the GPU's time for a call too short to launch from Python."""
    return bench_ms(graphed(fn, device), device)


def l2_bytes(device) -> int | None:
    """The GPU's L2 size in bytes (torch.cuda.get_device_properties), None on the CPU."""
    if not is_cuda(device):
        return None
    import torch
    return torch.cuda.get_device_properties(device).L2_cache_size


def copies_for(nbytes: int, l2: int | None, factor: float = 4) -> int:
    """How many copies of an input of nbytes make a rotation at least `factor` times the L2 (1 without one)."""
    if not l2:
        return 1
    return max(2, math.ceil(factor * l2 / nbytes))


def rotating(make, nbytes: int, l2: int | None, factor: float = 4) -> list:
    """make() called copies_for(nbytes, l2) times. Cycling through the copies, a call finds its own evicted
    from the L2 by the others' clean lines, as a decode step finds one layer's weights after another's."""
    return [make() for _ in range(copies_for(nbytes, l2, factor))]


def flush_l2(device, nbytes: int = 256 * 2**20) -> None:
    """Overwrite the L2 with zeros of a buffer larger than it (256 MiB, as do_bench), so the next read is cold."""
    if is_cuda(device):
        import torch
        torch.empty(nbytes, dtype=torch.int8, device=device).zero_()
