"""The serving lab's measurements: each checks before it times. Speculative decoding and the schedulers run the
tiny decoder end to end (host overhead included, as a serving loop has it). The quantised GEMMs are timed as CUDA
graph replays over rotating copies of the layer (rotated_ms), as consecutive decode layers read their weights; the
FP8 GEMM, far larger than the L2, as graph replays with the L2 flushed."""
from __future__ import annotations

import statistics

import torch

from snippets.common.checks import fresh_seed, rel_error
from snippets.common.timing import bench_ms, events_ms, graphed, l2_bytes, replay_ms, rotating, timed_call
from snippets.inference.paged_kv.model import TinyDecoder
from snippets.inference.serving import lm, mma_gemv, quant, scheduler
from snippets.inference.serving import speculative as sp


def spec_decode(target: TinyDecoder, draft: TinyDecoder, prompts: list[list[int]], n: int, k: int,
                temperature: float = 0.0, seed: int = 0, reps: int = 1) -> dict:
    """Speculative against plain decoding over the same prompts: wall time (the median of `reps` runs of each,
    taken in turns, so a drift in clocks or host load reaches both), acceptance rate, tokens per target call.
    Greedy (temperature 0) must give plain decoding's tokens exactly; that is checked."""
    device = target.emb.device
    tm, dm = lm.as_model(target, temperature=temperature), lm.as_model(draft, temperature=temperature)
    t_spec, t_plain = [], []
    for _ in range(reps):
        stats = sp.Stats()  # each run draws the same tokens from the same seed: the last run's counts stand
        g = torch.Generator().manual_seed(seed)
        spec, seconds = timed_call(lambda: [sp.generate(tm, dm, p, n, k, g, stats) for p in prompts], device)
        t_spec.append(seconds)
        g = torch.Generator().manual_seed(seed)
        plain, seconds = timed_call(lambda: [sp.sample_plain(tm, p, n, g) for p in prompts], device)
        t_plain.append(seconds)
        if temperature == 0 and spec != plain:
            raise AssertionError(f"greedy speculative decoding changed the tokens (k={k})")
    t_spec, t_plain, tokens = statistics.median(t_spec), statistics.median(t_plain), n * len(prompts)
    return {"k": k, "temperature": temperature, "acceptance": stats.acceptance_rate,
            "tokens_per_target_call": tokens / stats.target_calls, "speedup": t_plain / t_spec,
            "ms_per_token_plain": 1e3 * t_plain / tokens, "ms_per_token_spec": 1e3 * t_spec / tokens}


def batching(net: TinyDecoder, requests, max_batch: int, num_blocks: int, block_size: int = 16,
             chunk: int | None = None, reps: int = 1, graphs: bool | None = None) -> dict:
    """Continuous against static batching on one trace (and continuous with chunked prefill, `chunk` tokens per
    step, if given): the same tokens (checked), then each one's metrics. After one untimed pass of each, `reps`
    timed passes are taken in turns, so a drift in the host's speed reaches every scheduler; each reports its
    median pass (by tokens/s), and the ratio is the median of the ratios within a pass. All run on one engine,
    emptied before each pass; graphs (default: on a GPU) replays each step as a CUDA graph."""
    graphs = net.emb.is_cuda if graphs is None else graphs
    engine = scheduler.Engine(net, num_blocks, block_size, graphs=graphs)
    runs = {"continuous": scheduler.run_continuous, "static": scheduler.run_static}
    if chunk:
        runs["continuous, chunked prefill"] = lambda e, r, b: scheduler.run_continuous(e, r, b, chunk=chunk)
    passes = {name: [] for name in runs}
    # pass 0 only warms up: Triton compiles a variant of the decode kernel for each batch shape it first meets
    # (integer arguments are specialised on divisibility by 16), and the engine captures its graphs
    for rep in range(reps + 1):
        recs = {}
        for name, run in runs.items():
            engine.reset()
            recs[name], seconds = run(engine, requests, max_batch)
            if rep:
                passes[name].append(scheduler.metrics(recs[name], requests, seconds))
        for name in runs:
            bad = [r.rid for r in requests if recs[name][r.rid].tokens != recs["static"][r.rid].tokens]
            if bad:
                raise AssertionError(f"{name} and static batching disagree on requests {bad[:10]}")
    out = {name: sorted(p, key=lambda m: m["tokens_per_s"])[len(p) // 2] for name, p in passes.items()}
    out["throughput_ratio"] = statistics.median(
        c["tokens_per_s"] / s["tokens_per_s"] for c, s in zip(passes["continuous"], passes["static"]))
    return out


def rotated_ms(fns, device, reps: int = 50) -> float:
    """Median milliseconds per call of fns run back to back, each on its own copy of the inputs, captured in one
    CUDA graph and timed with events. When a copy comes round again the L2 holds only other copies' clean lines, as
    when a decode step reads one layer's weights after another's; a flush by writing a large buffer would instead
    leave the L2 full of dirty lines, whose write-back a small read pays for."""
    run = graphed(lambda: [f() for f in fns], device)
    if not str(device).startswith("cuda"):
        return bench_ms(run, device) / len(fns)
    return events_ms(run, trials=reps, warmup=3) / len(fns)


def quant_gemm(m: int, n: int, k: int, dtype, device, group: int = 128,
               configs=(("mma", 64, 128, 4, 3, 1),)) -> dict:
    """y = x @ W.T at batch m: bf16/fp16 cuBLAS against W8A16 and W4A16, each the fastest of `configs`:
    ("gemv", block_n, step, k_per_prog, warps, prefetch), the CUDA-core kernel (up to quant.GEMV_MAX_ROWS rows;
    skipped above), "gemv2" the same with f16x2 arithmetic (fp16 x, on a GPU), ("cuda", tw, kw, stages, splits)
    the CUDA tensor-core kernel of mma_gemv.mma_gemv (up to 8 rows; W4 with x in the baseline's dtype, fp16 or bf16;
    W8 with fp16 x), or ("mma", block_n, block_k, warps, stages, split_k), the Triton tensor-core one. The kernel error
    (against dequantise-then-matmul) and the quantisation error are apart. With a gemv config, also two bounds: the fastest
    time to only read the packed weights on the same grids, and cuBLAS on a 16-bit layer of as many bytes as the
    packed weights (N * bits / 16 rows). Everything is timed by rotated_ms. The 16-bit layer runs in x's dtype and
    in bf16 (dense_by_dtype_ms), and the faster of the two is the baseline of every speedup (dense_ms, dense_dtype),
    the same-bytes layer running in it too; the baseline also with the L2 flushed (dense_flushed_ms), to show what
    the flush costs a read this small."""
    g = torch.Generator(device).manual_seed(fresh_seed())
    l2 = l2_bytes(device)
    w = torch.randn(n, k, generator=g, device=device) / k**0.5
    x = torch.randn(m, k, generator=g, device=device).to(dtype)
    by_dtype = {}
    for dt in dict.fromkeys((dtype, torch.bfloat16)):
        xd, dense = x.to(dt), rotating(lambda: w.to(dt), w.nbytes // 2, l2)
        by_dtype[dt] = rotated_ms([lambda d=d: xd @ d.T for d in dense], device)
        del dense
    fast = min(by_dtype, key=by_dtype.get)
    xf, wf = x.to(fast), w.to(fast)
    out = {"m": m, "dense_ms": by_dtype[fast], "dense_dtype": str(fast).removeprefix("torch."),
           "dense_by_dtype_ms": {str(dt).removeprefix("torch."): ms for dt, ms in by_dtype.items()},
           "dense_flushed_ms": replay_ms(lambda: xf @ wf.T, device)}
    rows = {"gemv": quant.GEMV_MAX_ROWS, "gemv2": quant.GEMV_MAX_ROWS, "cuda": 8}  # the most rows each kind takes
    applicable = [c for c in configs if m <= rows.get(c[0], m)]
    pack = {"mma": lambda q, s, bits: (q.clone(), s.clone()),
            "cuda": lambda q, s, bits: mma_gemv.pack_mma(q, s, group, bits),
            "gemv": lambda q, s, bits: quant.pack_gemv(q, s, bits, group),
            "gemv2": lambda q, s, bits: quant.pack_gemv(q, s, bits, group, paired=True)}
    for bits in (8, 4):
        xc = xf if bits == 4 else x.half()  # the CUDA kernel's x: W8 takes fp16 only
        q, s = quant.quantize(w, bits, group)
        nbytes = q.nbytes + s.nbytes
        layers = {}  # the copies each kind of kernel reads
        for kind in {c[0] for c in applicable}:
            layers[kind] = rotating(lambda: pack[kind](q, s, bits), nbytes, l2)
        deq = quant.dequantize(q, s, bits, group)
        refs = {dt: xd.float() @ deq.to(dt).float().T for dt, xd in {dtype: x, xc.dtype: xc}.items()}
        best, read, by_kind = None, None, {}
        for kind, *cfg in applicable:
            if kind == "mma":
                fns = [lambda c=c: quant.wq_matmul(x, *c, bits, group, *cfg) for c in layers[kind]]
            elif kind == "cuda":
                fns = [lambda p=p: mma_gemv.mma_gemv(xc, p, *cfg) for p in layers[kind]]
            else:
                fns = [lambda p=p: quant.wq_gemv(x, p, *cfg) for p in layers[kind]]
            y = graphed(fns[0], device)()
            ref = refs[y.dtype]
            err = rel_error(y.float(), ref)
            if not err < 1e-2:
                raise AssertionError(f"W{bits}A16 m={m} config {(kind, *cfg)}: kernel error {err:.3g}")
            ms = rotated_ms(fns, device)
            by_kind[kind] = min(ms, by_kind.get(kind, ms))
            if best is None or ms < best[0]:
                best = (ms, (kind, *cfg))
            if kind in ("gemv", "gemv2"):
                ms = rotated_ms([lambda p=p: quant.read_words(p, k, *cfg[:4]) for p in layers[kind]], device)
                read = ms if read is None else min(read, ms)
        out[f"w{bits}_ms"], out[f"w{bits}_config"], out[f"w{bits}_by_kind_ms"] = *best, by_kind
        out[f"w{bits}_speedup"] = out["dense_ms"] / best[0]
        if read is not None:
            out[f"w{bits}_read_ms"], out[f"w{bits}_read_speedup"] = read, out["dense_ms"] / read
            same = rotating(lambda: wf[: n * bits // 16].clone(), wf.nbytes * bits // 16, l2)
            ms = rotated_ms([lambda d=d: xf @ d.T for d in same], device)
            out[f"w{bits}_same_bytes_ms"], out[f"w{bits}_same_bytes_speedup"] = ms, out["dense_ms"] / ms
        out[f"w{bits}_quant_error"] = ((deq - w).norm() / w.norm()).item()
        del layers
    return out


def fp8_gemm(m: int, n: int, k: int, device) -> dict:
    """W8A8 in FP8 (e4m3, per-tensor scales) through torch._scaled_mm against the bf16 GEMM: the compute-side
    contrast to weight-only quantisation. Needs FP8 tensor cores (compute capability 8.9 or newer)."""
    g = torch.Generator(device).manual_seed(fresh_seed())
    a = torch.randn(m, k, generator=g, device=device)
    b = torch.randn(n, k, generator=g, device=device)
    fp8 = torch.float8_e4m3fn
    sa, sb = a.abs().max() / torch.finfo(fp8).max, b.abs().max() / torch.finfo(fp8).max
    a8, b8 = (a / sa).to(fp8), (b / sb).to(fp8)
    a16, b16 = a.bfloat16(), b.bfloat16()
    run8 = graphed(lambda: torch._scaled_mm(a8, b8.T, scale_a=sa.float(), scale_b=sb.float(), out_dtype=torch.bfloat16),
                   device)
    run16 = graphed(lambda: a16 @ b16.T, device)
    ref = a.double() @ b.double().T
    err8 = ((run8().double() - ref).norm() / ref.norm()).item()
    err16 = ((run16().double() - ref).norm() / ref.norm()).item()
    if not (err8 < 0.1 and err16 < 1e-2):
        raise AssertionError(f"fp8 error {err8:.3g}, bf16 error {err16:.3g}")
    ms8, ms16 = bench_ms(run8, device), bench_ms(run16, device)
    flops = 2 * m * n * k
    return {"fp8_tflops": flops / ms8 / 1e9, "bf16_tflops": flops / ms16 / 1e9, "speedup": ms16 / ms8,
            "fp8_error": err8, "bf16_error": err16}
