"""The CuTe DSL add + LayerNorm forward against the lab-02 Triton kernel, eager PyTorch and torch.compile,
each checked against a float64 reference first, at hidden sizes of public models; and, on any machine, what
the kernel's thread-value layout means for its memory accesses (snippets/cute/layout.py)."""
from __future__ import annotations

import torch

from snippets.common.checks import poisoned_outputs
from snippets.common.timing import bench_ms, replay_ms
from snippets.cute import layout as L
from snippets.cute_dsl import add_layernorm as cd
from snippets.fusion import add_layernorm as al
from snippets.fusion.bench import TOL, check, compile_fn, ln_inputs

# (model, hidden size): Llama-3.1-8B, Qwen3-32B, DeepSeek-V3, Llama-3.1-70B
WIDTHS = [("Llama-3.1-8B", 4096), ("Qwen3-32B", 5120), ("DeepSeek-V3", 7168), ("Llama-3.1-70B", 8192)]


def tv_accesses(threads: int = cd.THREADS, vec: int = cd.VEC, elem_bytes: int = 2, sector: int = 32) -> dict:
    """What the kernel's thread-value layout over a one-row tile (threads x vec elements) implies for one
    warp-wide access, from the layout algebra alone: bytes each lane moves in one contiguous run (16 = one
    128-bit instruction), and the sectors a warp needs at least over the 32-byte sectors it touches (1.0 =
    every byte fetched is used)."""
    tv, _ = L.make_layout_tv(L.Layout((1, threads), (threads, 1)), L.Layout((1, vec), (vec, 1)))
    run = 1
    while run < vec and tv(0, run) == tv(0, 0) + run:
        run += 1
    efficiency = 1.0
    for warp in range(max(threads // 32, 1)):
        touched = {(tv(t, v) * elem_bytes) // sector for t in range(warp * 32, warp * 32 + 32) for v in range(vec)}
        efficiency = min(efficiency, (32 * vec * elem_bytes / sector) / len(touched))
    return {"tv": str(tv), "bytes_per_access": run * elem_bytes, "sector_efficiency": efficiency}


def measure(rows: int, n: int, dtype=torch.bfloat16, compiled=None) -> dict:
    """GPU ms of each implementation (checked first), replayed from a CUDA graph so that no launch overhead
    counts, the same run's copy of as many bytes, and ("<name> call") each kernel called from Python."""
    x, r, w, b = ln_inputs(rows, n, dtype, "cuda")
    y_ref, h_ref = al.add_layernorm_ref(x, r, w, b, 1e-5, dtype=torch.float64)
    runs = {"cute_dsl": lambda: cd.add_layernorm(x, r, w, b)[::-1],
            "triton": lambda: al.add_layernorm_fwd(x, r, w, b)[:2],
            "eager": lambda: al.add_layernorm_eager(x, r, w, b)}
    if compiled is not None:
        runs["compile"] = lambda: compiled(x, r, w, b)
    ms = {}
    for name, fn in runs.items():
        with poisoned_outputs():
            y, h = fn()
        check(f"{name} y ({rows}x{n})", y, y_ref, TOL[dtype])
        check(f"{name} h ({rows}x{n})", h, h_ref, TOL[dtype])
        ms[name] = replay_ms(fn, "cuda")
        if name in ("cute_dsl", "triton"):
            ms[f"{name} call"] = bench_ms(fn, "cuda")
    src = torch.randn(2 * rows * n, device="cuda", dtype=dtype)  # reads 2 rows x n, writes 2: as the kernels
    dst = torch.empty_like(src)
    ms["copy"] = replay_ms(lambda: dst.copy_(src), "cuda")
    return ms


def compiled_baseline():
    return compile_fn(al.add_layernorm_eager)
