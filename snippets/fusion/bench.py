"""The fusion lab's measurements: each function checks every variant against an fp64 reference on fresh random
inputs (outputs poisoned with NaN first) and only then times it with snippets.common.timing (medians, L2
flushed). Times are in ms; effective bandwidth counts the bytes the fused kernel must move (bytes.py)."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
import triton

from snippets.common.checks import fresh_seed, poisoned_outputs, rel_error
from snippets.common.timing import bench_ms
from snippets.fusion import add_layernorm as al
from snippets.fusion import bytes as fb
from snippets.fusion import gemm as gm
from snippets.fusion import slowdown as sd

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 8e-3}


def check(name: str, out: torch.Tensor, ref: torch.Tensor, tol: float) -> float:
    """Relative Frobenius error of out against ref; raises naming the variant when it is too large or NaN."""
    err = rel_error(out, ref)
    if not err <= tol:  # NaN fails too
        raise AssertionError(f"{name}: relative error {err:.3g} over {tol:g}")
    return err


def generator(device) -> torch.Generator:
    return torch.Generator(device).manual_seed(fresh_seed())


def compile_fn(fn, **kwargs):
    """torch.compile(partial(fn, **kwargs)), recompiling for each new shape instead of falling back to eager
    after 8 of them."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    return torch.compile(functools.partial(fn, **kwargs), dynamic=False)


def ln_inputs(m, n, dtype, device, grad=False):
    g = generator(device)
    x, r = (torch.randn(m, n, generator=g, device=device, dtype=dtype) for _ in range(2))
    w = (1 + 0.5 * torch.randn(n, generator=g, device=device)).to(dtype)
    b = (0.5 * torch.randn(n, generator=g, device=device)).to(dtype)
    return [t.requires_grad_(grad) for t in (x, r, w, b)]


def check_own_dropout(name, y, h, x, r, w, b, p, dtype) -> float:
    """For kernels that draw their own dropout mask (eager, torch.compile), so no reference has it: every
    element of h is r (dropped) or x / (1 - p) + r (kept, up to two roundings), the kept fraction is 1 - p
    within 6 sigma, and y is the LayerNorm of h as stored. Returns the kept fraction."""
    x64, r64, h64 = x.double(), r.double(), h.double()
    xs = x64 / (1 - p)
    eps = torch.finfo(dtype).eps
    is_dropped = h64 == r64
    is_kept = (h64 - (xs + r64)).abs() <= 2 * eps * (xs.abs() + r64.abs()) + 1e-30
    if not bool((is_dropped | is_kept).all()):
        raise AssertionError(f"{name}: {int((~(is_dropped | is_kept)).sum())} elements of h are neither r nor x/(1-p) + r")
    # count only where kept and dropped cannot look alike: a rule on x and r alone, so it does not bias the count
    decisive = xs.abs() > 8 * eps * (xs.abs() + r64.abs())
    total = int(decisive.sum())
    frac = int((decisive & ~is_dropped).sum()) / total
    sigma = (p * (1 - p) / total) ** 0.5
    if abs(frac - (1 - p)) > 6 * sigma:
        raise AssertionError(f"{name}: kept fraction {frac:.5f}, expected {1 - p} (6 sigma = {6 * sigma:.2g})")
    check(f"{name} y", y, F.layer_norm(h64, (h.shape[-1],), w.double(), b.double(), 1e-5), TOL[dtype])
    return frac


def layernorm_forward(m, n, dtype, device, p=0.0, ext=None, compiled=None) -> dict:
    """Fused Triton, hand-written CUDA (ext), eager and torch.compile (`compiled`, built for this p) forward of
    h = dropout(x, p) + r, y = LayerNorm(h) w + b."""
    x, r, w, b = ln_inputs(m, n, dtype, device)
    seed = fresh_seed()
    keep = al.dropout_mask(seed, (m, n), p, device) if p > 0 else None
    y_ref, h_ref = al.add_layernorm_ref(x, r, w, b, 1e-5, p, keep, dtype=torch.float64)
    runs = {"triton": lambda: al.add_layernorm_fwd(x, r, w, b, p=p, seed=seed)[:2],
            "eager": lambda: al.add_layernorm_eager(x, r, w, b, p=p)}
    if ext is not None:
        runs["cuda"] = lambda: ext.add_layernorm_fwd(x, r, w, b, 1e-5, p, seed, False)[:2]
    if compiled is not None:
        runs["compile"] = lambda: compiled(x, r, w, b)
    ms = {}
    for name, fn in runs.items():
        with poisoned_outputs():
            y, h = fn()
        if p > 0 and name in ("eager", "compile"):
            check_own_dropout(f"{name} (m={m}, n={n}, p={p})", y, h, x, r, w, b, p, dtype)
        else:
            check(f"{name} y (m={m}, n={n}, p={p})", y, y_ref, TOL[dtype])
            check(f"{name} h (m={m}, n={n}, p={p})", h, h_ref, TOL[dtype])
        ms[name] = bench_ms(fn, device)
    nbytes = fb.fused_fwd_bytes(m, n, x.element_size())
    return {"m": m, "n": n, "p": p, "ms": ms, "gbps": {k: fb.effective_gbps(nbytes, v) for k, v in ms.items()}}


def layernorm_backward(m, n, dtype, device, compiled=None) -> dict:
    """Backward of the same block for dy (into y) and dh (into h: the residual stream goes on): the fused
    kernel against autograd through eager and through torch.compile."""
    x, r, w, b = ln_inputs(m, n, dtype, device, grad=True)
    g = generator(device)
    dy, dh = (torch.randn(m, n, generator=g, device=device, dtype=dtype) for _ in range(2))
    leaves = [t.detach().double().requires_grad_() for t in (x, r, w, b)]
    y64, h64 = al.add_layernorm_ref(*leaves, dtype=torch.float64, h_dtype=dtype)
    refs = torch.autograd.grad((y64, h64), leaves, (dy.double(), dh.double()))
    with torch.no_grad():
        _, h, mean, rstd = al.add_layernorm_fwd(x, r, w, b)
    runs = {"triton": lambda: al.add_layernorm_bwd(dy, dh, h, w, b, mean, rstd)}
    for name, fn in [("eager", al.add_layernorm_eager), ("compile", compiled)]:
        if fn is not None:
            outs = fn(x, r, w, b)
            runs[name] = lambda outs=outs: torch.autograd.grad(outs, (x, r, w, b), (dy, dh), retain_graph=True)
    ms = {}
    for name, fn in runs.items():
        with poisoned_outputs():
            grads = fn()
        for label, got, ref in zip(("dx", "dr", "dw", "db"), grads, refs):
            check(f"{name} {label} (m={m}, n={n})", got, ref, TOL[dtype] * (4 if label in ("dw", "db") else 1))
        ms[name] = bench_ms(fn, device)
    nbytes = fb.fused_bwd_bytes(m, n, x.element_size(), programs=al.bwd_layout(m, n, device)[-1])
    return {"m": m, "n": n, "ms": ms, "gbps": {k: fb.effective_gbps(nbytes, v) for k, v in ms.items()}}


def sweep_bwd_launch(m, n, dtype, device, rows=(1, 2, 4), warps=(4, 8, 16, 32), per_sm=(1, 2, 8)) -> list[list]:
    """Time the fused backward over launch choices (rows per step, warps, programs per SM), each checked first:
    where add_layernorm._BWD comes from. Rows of [n, rows, warps, programs, ms]."""
    x, r, w, b = ln_inputs(m, n, dtype, device)
    g = generator(device)
    dy, dh = (torch.randn(m, n, generator=g, device=device, dtype=dtype) for _ in range(2))
    with torch.no_grad():
        _, h, mean, rstd = al.add_layernorm_fwd(x, r, w, b)
    leaves = [t.detach().double().requires_grad_() for t in (x, r, w, b)]
    refs = torch.autograd.grad(al.add_layernorm_ref(*leaves, dtype=torch.float64, h_dtype=dtype), leaves,
                               (dy.double(), dh.double()))
    sms = al.sm_count(torch.device(device))
    out = []
    for bm in rows:
        for nw in warps:
            for k in per_sm:
                run = lambda: al.add_layernorm_bwd(dy, dh, h, w, b, mean, rstd, programs=k * sms, config=(bm, nw))  # noqa: E731
                with poisoned_outputs():
                    grads = run()
                for label, got, ref in zip(("dx", "dr", "dw", "db"), grads, refs):
                    check(f"backward {label} (n={n}, rows={bm}, warps={nw}, programs={k * sms})", got, ref,
                          TOL[dtype] * (4 if label in ("dw", "db") else 1))
                programs = al.bwd_layout(m, n, device, k * sms, (bm, nw))[-1]  # after rounding rows to BLOCK_M
                out.append([n, bm, nw, programs, bench_ms(run, device)])
    return out


class NoConfigFits(RuntimeError):
    """No candidate config of a kernel fits this GPU (shared memory or registers)."""


def tune(name, run, ref, configs, device, tol) -> tuple[gm.Config, float, list]:
    """Check and time run(config) for each config; configs the GPU cannot hold are reported, not hidden.
    Returns (best config, its ms, rows of [config, ms or the reason it did not run])."""
    rows, best = [], None
    for cfg in configs:
        try:
            with poisoned_outputs():
                out = run(cfg)
        except triton.runtime.errors.OutOfResources as e:
            rows.append([str(cfg), f"does not fit: {e}"])
            continue
        check(f"{name} {cfg}", out, ref, tol)
        ms = bench_ms(lambda: run(cfg), device)
        rows.append([str(cfg), ms])
        if best is None or ms < best[1]:
            best = (cfg, ms)
    if best is None:
        raise NoConfigFits(f"{name}: no config fits this GPU: {rows}")
    return best[0], best[1], rows


def gemm_inputs(m, n, k, dtype, device):
    g = generator(device)
    a = torch.randn(m, k, generator=g, device=device, dtype=dtype)
    w = torch.randn(n, k, generator=g, device=device, dtype=dtype) / k**0.5  # a linear layer's weight
    bias = torch.randn(n, generator=g, device=device, dtype=dtype)
    return a, w.t(), bias


def epilogue(m, n, k, dtype, device, configs, with_compile=True) -> dict:
    """gelu(A @ B + bias): Triton with the epilogue fused, against cuBLAS + add + GELU (eager), cuBLAS with the
    bias in addmm + GELU, cuBLASLt with bias and GELU in its own epilogue (torch._addmm_activation), and
    torch.compile of the eager code; the plain GEMMs show what the epilogue costs on top."""
    a, b, bias = gemm_inputs(m, n, k, dtype, device)
    ref = gm.gemm_ref(a, b, bias, gelu=True)
    cfg, fused_ms, rows = tune("fused epilogue", lambda c: gm.gemm(a, b, bias, gelu=True, config=c), ref,
                               configs, device, TOL[dtype])
    ms = {"triton_fused": fused_ms}
    baselines = [("eager_unfused", gm.bias_gelu_unfused), ("addmm_gelu", gm.bias_gelu_addmm)]
    if device.startswith("cuda"):
        baselines.append(("cublaslt_fused", gm.bias_gelu_cublaslt))
    if with_compile:
        baselines.append(("compile", compile_fn(gm.bias_gelu_unfused)))
    for name, fn in baselines:
        check(f"{name} (m={m}, n={n}, k={k})", fn(a, b, bias), ref, TOL[dtype])
        ms[name] = bench_ms(lambda fn=fn: fn(a, b, bias), device)
    plain_ref = gm.gemm_ref(a, b)
    check("cublas", a @ b, plain_ref, TOL[dtype])
    ms["cublas_gemm_only"] = bench_ms(lambda: a @ b, device)
    check("triton plain", gm.gemm(a, b, config=cfg), plain_ref, TOL[dtype])
    ms["triton_gemm_only"] = bench_ms(lambda: gm.gemm(a, b, config=cfg), device)
    return {"shape": (m, n, k), "config": str(cfg), "ms": ms, "tuning": rows,
            "speedup_vs_unfused": ms["eager_unfused"] / fused_ms}


def case_register_pressure(m, n, dtype, device, fused_warps=8, fixed_warps=32) -> dict:
    """One row per program, the whole row in registers: at fused_warps the state spills, at fixed_warps it fits."""
    x, r, w, b = ln_inputs(m, n, dtype, device)
    y_ref, h_ref = al.add_layernorm_ref(x, r, w, b, dtype=torch.float64)
    out = {"ms": {}, "resources": {}}
    for label, warps in (("fused", fused_warps), ("fused_fixed", fixed_warps)):
        with poisoned_outputs():
            y, h, kernel = sd.wide_add_layernorm(x, r, w, b, warps)
        check(f"{label} y", y, y_ref, TOL[dtype])
        check(f"{label} h", h, h_ref, TOL[dtype])
        out["ms"][label] = bench_ms(lambda warps=warps: sd.wide_add_layernorm(x, r, w, b, warps), device)
        out["resources"][label] = sd.resources(kernel) if kernel is not None else None
    y, h = sd.unfused_add_layernorm(x, r, w, b)
    check("unfused y", y, y_ref, TOL[dtype])
    out["ms"]["unfused"] = bench_ms(lambda: sd.unfused_add_layernorm(x, r, w, b), device)
    out["slowdown"] = out["ms"]["fused"] / out["ms"]["unfused"]
    return out


def case_lost_concurrency(rows, length, device) -> dict:
    """Two independent row reductions of `rows` programs each: serial fusion against two streams and joined grids."""
    g = generator(device)
    x, y = (torch.randn(rows, length, generator=g, device=device) for _ in range(2))
    rx, ry = (t.double().square().sum(1) for t in (x, y))
    streams = (torch.cuda.Stream(), torch.cuda.Stream()) if device.startswith("cuda") else None
    runs = {"fused_serial": lambda: sd.sumsq_pair(x, y, serial=True),
            "fused_joined_grids": lambda: sd.sumsq_pair(x, y, serial=False),
            "two_launches_one_stream": lambda: (sd.sumsq(x), sd.sumsq(y))}
    if streams:
        runs["two_streams"] = lambda: sd.on_two_streams(lambda: sd.sumsq(x), lambda: sd.sumsq(y), streams)
    with poisoned_outputs():
        check("one reduction", sd.sumsq(x), rx, 1e-5)
    ms = {"one_reduction": bench_ms(lambda: sd.sumsq(x), device)}
    for name, fn in runs.items():
        with poisoned_outputs():
            ox, oy = fn()
            if streams:
                torch.cuda.synchronize()
        check(f"{name} x", ox, rx, 1e-5)
        check(f"{name} y", oy, ry, 1e-5)
        ms[name] = bench_ms(fn, device)
    base = ms.get("two_streams", ms["fused_joined_grids"])
    return {"ms": ms, "programs": {"fused_serial": rows, "each_reduction": rows, "fused_joined_grids": 2 * rows},
            "slowdown": ms["fused_serial"] / base}


def case_tile_mismatch(m, n, k, dtype, device, configs) -> dict:
    """RMSNorm(A @ B) * w: the norm in the GEMM epilogue (tile holds whole rows) against the GEMM at its own
    best tile followed by F.rms_norm."""
    a, b, _ = gemm_inputs(m, n, k, dtype, device)
    w = (1 + 0.5 * torch.randn(n, generator=generator(device), device=device)).to(dtype)
    ref = gm.gemm_ref(a, b, norm_weight=w)
    fcfg, fused_ms, frows = tune("gemm + row norm", lambda c: gm.gemm(a, b, norm_weight=w, config=c), ref,
                                 gm.row_norm_configs(n), device, TOL[dtype])
    unfused = lambda c: F.rms_norm(gm.gemm(a, b, config=c), (n,), w, 1e-6)  # noqa: E731
    ucfg, unfused_ms, urows = tune("gemm, then rms_norm", unfused, ref, configs, device, TOL[dtype])
    res = {}
    if device.startswith("cuda"):
        res = {"fused": sd.resources(gm.launch(a, b, norm_weight=w, config=fcfg)[1]),
               "unfused_gemm": sd.resources(gm.launch(a, b, config=ucfg)[1])}
    # each row block of the output reads all of B again (from L2 when it stays there)
    b_reads = {lbl: triton.cdiv(m, c.block_m) * k * n * a.element_size() for lbl, c in (("fused", fcfg), ("unfused", ucfg))}
    return {"ms": {"fused": fused_ms, "unfused": unfused_ms}, "configs": {"fused": str(fcfg), "unfused": str(ucfg)},
            "tuning": {"fused": frows, "unfused": urows}, "resources": res, "b_bytes_read": b_reads,
            "slowdown": fused_ms / unfused_ms}


def case_prologue_recompute(m, n, k, dtype, device, configs) -> dict:
    """(gelu(A)) @ B: GELU inside the GEMM's K loop against one GELU kernel, then the GEMM."""
    a, b, _ = gemm_inputs(m, n, k, dtype, device)
    ref = gm.gemm_ref(a, b, prologue_gelu=True)
    fcfg, fused_ms, frows = tune("gelu prologue", lambda c: gm.gemm(a, b, prologue_gelu=True, config=c), ref,
                                 configs, device, TOL[dtype])
    unfused = lambda c: gm.gemm(F.gelu(a, approximate="tanh"), b, config=c)  # noqa: E731
    ucfg, unfused_ms, urows = tune("gelu, then gemm", unfused, ref, configs, device, TOL[dtype])
    res = {}
    if device.startswith("cuda"):
        res = {"fused": sd.resources(gm.launch(a, b, prologue_gelu=True, config=fcfg)[1]),
               "unfused_gemm": sd.resources(gm.launch(a, b, config=ucfg)[1])}
    return {"ms": {"fused": fused_ms, "unfused": unfused_ms}, "configs": {"fused": str(fcfg), "unfused": str(ucfg)},
            "tuning": {"fused": frows, "unfused": urows}, "resources": res,
            "gelu_evaluations": {"fused": m * k * triton.cdiv(n, fcfg.block_n), "unfused": m * k},
            "slowdown": fused_ms / unfused_ms}
