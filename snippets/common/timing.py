"""Median time of a function: triton.testing.do_bench (CUDA events) on a GPU, a host clock on the CPU."""
from __future__ import annotations

import statistics
import time


def bench_ms(fn, device: str, warmup_ms: float = 25, rep_ms: float = 100, cpu_reps: int = 5) -> float:
    """Median milliseconds of `fn()`. On CUDA, do_bench flushes the L2 before every run."""
    if device.startswith("cuda"):
        from triton.testing import do_bench
        return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    fn()
    times = []
    for _ in range(cpu_reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)
