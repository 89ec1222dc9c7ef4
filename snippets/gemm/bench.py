"""Check, then time: every GEMM variant against an fp32 reference on fresh random inputs (outputs
poisoned with NaN first, shapes that are not multiples of the tile), then TFLOP/s and the fraction of
cuBLAS (torch.matmul) measured in the same run, medians of triton.testing.do_bench."""
from __future__ import annotations

import contextlib

import torch

from snippets.common.checks import fresh_seed, poisoned_outputs
from snippets.common.timing import do_bench_ms
from snippets.gemm import hopper, triton_ws

# shapes for the correctness check: exact tiles, ragged edges in every dimension, K shorter than one slab
CHECK_SHAPES = [(128, 256, 64), (64, 128, 8), (333, 520, 200), (1000, 1000, 1000), (2053, 1064, 3000),
                (257, 264, 4104)]
TIME_SHAPES = [(8192, 8192, 8192), (6144, 6144, 6144), (4096, 14336, 4096)]  # (M, N, K); C = A @ B.T


def inputs(m: int, n: int, k: int, dtype=torch.bfloat16, device="cuda", seed: int | None = None):
    g = torch.Generator(device=device).manual_seed(fresh_seed() if seed is None else seed)
    a = torch.randn(m, k, generator=g, device=device).to(dtype)
    b = torch.randn(n, k, generator=g, device=device).to(dtype)
    return a, b


def reference(a, b):
    """fp32 product of the bf16 inputs (exact products, fp32 sums), with TF32 off."""
    with _no_tf32():
        return a.float() @ b.float().T


@contextlib.contextmanager
def _no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def compare(c, ref) -> dict:
    """Error of a bf16 result against the fp32 reference. The bound: one bf16 rounding of the output
    (2^-8 relative; 2^-7 where the interpreter truncates) plus fp32 summation noise."""
    c32 = c.float()
    err = (c32 - ref).abs()
    bad_nan = int((~torch.isfinite(c32)).sum())
    bound = 2.0**-7 * ref.abs() + 2.0**-10 * ref.pow(2).mean().sqrt()
    over = (err > bound) | ~torch.isfinite(c32)
    worst = int(torch.nan_to_num(err, nan=float("inf")).argmax())
    row, col = divmod(worst, ref.shape[1])
    return {"ok": not bool(over.any()), "max_abs_err": float(torch.nan_to_num(err, nan=float("inf")).max()),
            "rel_err": float((torch.nan_to_num(c32 - ref, nan=1e30)).norm() / ref.norm()),
            "not_finite": bad_nan, "over_bound": int(over.sum()), "worst": (row, col),
            "worst_value": (float(c32[row, col]), float(ref[row, col]))}


def variants(device="cuda", steps=tuple(hopper.STEPS), hopper_ok: bool = True) -> dict:
    """name -> fn(a, b) -> C for everything this machine can run."""
    out = {"cublas": lambda a, b: torch.matmul(a, b.T)}
    if hopper_ok:
        for s in steps:
            out[f"step{s}"] = lambda a, b, s=s: hopper.gemm(s, a, b)
        out["triton_ws"] = lambda a, b: triton_ws.ws_matmul(a, b, warp_specialize=True)
        out["triton_plain"] = lambda a, b: triton_ws.ws_matmul(a, b, warp_specialize=False)
    out["triton_portable"] = lambda a, b: triton_ws.portable_matmul(a, b)
    return out


def check(fn, shapes=CHECK_SHAPES, device="cuda", dtype=torch.bfloat16) -> list[dict]:
    """Run fn on fresh inputs for each shape with poisoned outputs; one report per shape."""
    reports = []
    for m, n, k in shapes:
        seed = fresh_seed()
        a, b = inputs(m, n, k, dtype, device, seed)
        with poisoned_outputs():
            c = fn(a, b)
        reports.append({"shape": (m, n, k), "seed": seed, **compare(c, reference(a, b))})
    return reports


def time_ms(fn, warmup: int = 50, rep: int = 200) -> float:
    """Median ms by do_bench (L2 flushed), with a longer warm-up and more runs than bench_ms for large GEMMs."""
    return do_bench_ms(fn, warmup, rep)


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def pick_config(fn_of_config, configs, a, b) -> tuple[object, float]:
    """The fastest config that is also correct on these inputs (each is checked first)."""
    ref, best = reference(a, b), None
    for cfg in configs:
        try:
            with poisoned_outputs():
                ok = compare(fn_of_config(cfg)(a, b), ref)["ok"]
        except Exception as e:  # a config the compiler rejects (shared memory, a WS crash)
            print(f"  config {cfg}: {type(e).__name__}: {str(e)[:200]}")
            continue
        if ok:
            ms = time_ms(lambda: fn_of_config(cfg)(a, b))
            if best is None or ms < best[1]:
                best = (cfg, ms)
    return best if best else (None, float("nan"))


def measure(m: int, n: int, k: int, fns: dict, device="cuda", triton_configs: bool = True) -> dict:
    """Times every variant (assumed checked) at one shape in this run; fractions are of cuBLAS's time."""
    a, b = inputs(m, n, k, device=device)
    ms, configs = {}, {}
    for name, fn in fns.items():
        if triton_configs and name in ("triton_ws", "triton_plain"):
            ws = name == "triton_ws"
            cfg, t = pick_config(lambda c, ws=ws: (lambda x, y: triton_ws.ws_matmul(x, y, ws, c)),
                                 triton_ws.WS_CONFIGS, a, b)
            ms[name], configs[name] = t, str(cfg)
        elif triton_configs and name == "triton_portable":
            cfg, t = pick_config(lambda c: (lambda x, y: triton_ws.portable_matmul(x, y, c)),
                                 triton_ws.PORTABLE_CONFIGS, a, b)
            ms[name], configs[name] = t, str(cfg)
        else:
            ms[name] = time_ms(lambda fn=fn: fn(a, b))
    base = ms["cublas"]
    return {"shape": (m, n, k), "ms": ms, "configs": configs,
            "tflops": {v: tflops(m, n, k, t) for v, t in ms.items()},
            "fraction_of_cublas": {v: base / t for v, t in ms.items()}}
