"""Timing inside the worker: every run gets new input values, a poisoned output and (on CUDA) a cold L2.

Not snippets.common.timing.bench_ms: do_bench syncs only the current stream and reuses one input, and
here each run must refill the inputs, so that work left on another stream is timed and caches miss.
"""
from __future__ import annotations

import statistics
import time

import torch

CPU_NOTE = "CPU perf_counter (Triton interpreter): says nothing about kernel speed"
CUDA_NOTE = "CUDA events around the call and a device-wide synchronize, L2 flushed, median"


def l2_flush_buffer(device: str) -> torch.Tensor | None:
    """A buffer twice the L2 size (at least 256 MB, as KernelBench): writing it evicts the inputs."""
    if not device.startswith("cuda"):
        return None
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    return torch.empty(max(2 * l2, 256 << 20), dtype=torch.int8, device=device)


def time_once_ms(fn, device: str, flush: torch.Tensor | None) -> float:
    """One run of fn(). CUDA: the end event is recorded after torch.cuda.synchronize(), so work that fn left
    on any stream (or thread) is inside the interval; both candidate and baseline pay the same few us."""
    if not device.startswith("cuda"):
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    flush.zero_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    fn()
    torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def time_rotating(fn, sets: list[tuple], bufs: list[torch.Tensor], out: torch.Tensor | None, device: str,
                  warmup: int, runs: int) -> tuple[list[float], list[tuple[int, torch.Tensor]]]:
    """Run fn() warmup + runs times; before each run copy input set i % len(sets) into the same buffers (a
    cache keyed on pointers goes stale) and poison `out`. Returns the timed runs and, for re-checking, the
    outputs of the last len(sets) runs as (set index, output)."""
    flush = l2_flush_buffer(device)
    times, last = [], []
    for i in range(warmup + runs):
        k = i % len(sets)
        for b, s in zip(bufs, sets[k]):
            b.copy_(s)
        if out is not None:
            out.fill_(float("nan"))
        t = time_once_ms(fn, device, flush)
        if i >= warmup:
            times.append(t)
        if out is not None and i >= warmup + runs - len(sets):
            last.append((k, out.detach().to("cpu", copy=True)))
    return times, last


def median(times: list[float]) -> float:
    return statistics.median(times)
