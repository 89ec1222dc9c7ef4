"""snippets/inference/serving on the CPU: the speculative sampler's output distribution equals the target's (a chi-square
test, several draft/target pairs including a bad draft, and a broken sampler that the same test must catch),
greedy as the special case, the acceptance rate against its closed form; continuous and static batching
produce the same tokens as plain generation, preemption included."""
import json
from types import SimpleNamespace

import pytest
import torch
from compiled import run_compiled

from snippets.common.checks import fresh_seed
from snippets.inference.serving import speculative as sp

pytestmark = [pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning")]

VOCAB, N = 3, 2  # 9 two-token continuations


def chi_square_p(counts: dict, expected: dict, trials: int) -> float:
    """p-value of Pearson's chi-square goodness of fit (regularised upper incomplete gamma)."""
    stat = sum((counts.get(key, 0) - trials * pr) ** 2 / (trials * pr) for key, pr in expected.items())
    stat += sum(c for key, c in counts.items() if key not in expected) * 1e9  # an impossible outcome
    df = len(expected) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2), torch.tensor(stat / 2)))


def pair(kind: str, g: torch.Generator):
    target = torch.randn(VOCAB, VOCAB, generator=g) * 1.5
    draft = {"close": target + 0.3 * torch.randn(VOCAB, VOCAB, generator=g),
             "bad": -target,  # prefers what the target avoids
             "uniform": torch.zeros(VOCAB, VOCAB)}[kind]
    return sp.bigram_model(target), sp.bigram_model(draft)


@pytest.mark.parametrize("kind, k", [("close", 1), ("close", 3), ("bad", 2), ("uniform", 4)])
def test_speculative_output_follows_the_target_distribution(kind, k):
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    target, draft = pair(kind, g)
    expected = sp.sequence_distribution(target, [0], N)
    trials, counts = 6000, {}
    for _ in range(trials):
        key = tuple(sp.generate(target, draft, [0], N, k, g))
        counts[key] = counts.get(key, 0) + 1
    p = chi_square_p(counts, expected, trials)
    assert p > 1e-4, f"seed {seed}: chi-square p = {p:.2e}, counts {counts}, expected {expected}"


def test_the_same_test_catches_a_sampler_that_always_accepts():
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    target, draft = pair("bad", g)
    expected = sp.sequence_distribution(target, [0], N)
    trials = 6000
    counts = {}
    for _ in range(trials):  # the bug: keep every draft token, i.e. sample from the draft
        key = tuple(sp.sample_plain(draft, [0], N, g))
        counts[key] = counts.get(key, 0) + 1
    assert chi_square_p(counts, expected, trials) < 1e-4, f"seed {seed}"


def test_greedy_is_the_special_case():
    g = torch.Generator().manual_seed(fresh_seed())
    logits = torch.randn(8, 8, generator=g)
    target = sp.bigram_model(logits, temperature=0)
    chain = [5]
    for _ in range(12):
        chain.append(int(logits[chain[-1]].argmax()))
    stats = sp.Stats()
    assert sp.generate(target, target, [5], 12, 4, g, stats) == chain[1:]
    assert stats.acceptance_rate == 1.0  # a draft equal to the target is always right
    other = sp.bigram_model(torch.randn(8, 8, generator=g), temperature=0)
    assert sp.generate(target, other, [5], 12, 3, g) == chain[1:]  # a wrong draft changes speed, not tokens


def test_acceptance_rate_matches_its_closed_form():
    """With k = 1 from a fixed token, a proposal is accepted with probability sum_x min(p(x), q(x))."""
    g = torch.Generator().manual_seed(fresh_seed())
    target, draft = pair("close", g)
    expected = float(torch.minimum(target.probs[0], draft.probs[0]).sum())
    stats = sp.Stats()
    for _ in range(4000):
        sp.speculative_round(target, draft, [0], 1, g, stats)
    sigma = (expected * (1 - expected) / 4000) ** 0.5
    assert abs(stats.acceptance_rate - expected) < 5 * sigma + 1e-9, (stats.acceptance_rate, expected)
    assert stats.rounds == stats.target_calls == 4000 and sum(stats.history) == stats.accepted


def test_sequence_distribution_sums_to_one():
    g = torch.Generator().manual_seed(1)
    target, _ = pair("close", g)
    dist = sp.sequence_distribution(target, [2], 3)
    assert len(dist) == VOCAB**3 and abs(sum(dist.values()) - 1) < 1e-12


def test_schedulers_agree_token_for_token_and_with_plain_generation():
    from snippets.inference.paged_kv import model as tiny
    from snippets.inference.serving import scheduler as sch

    net = tiny.TinyDecoder(max_len=128, seed=0)
    reqs = sch.trace(6, rate=0, seed=1, prompt_median=12, out_median=5, max_len=64)
    cont, cont_s = sch.run_continuous(sch.Engine(net, 64, 4), reqs, max_batch=4)
    stat, stat_s = sch.run_static(sch.Engine(net, 64, 4), reqs, max_batch=4)
    tight, tight_s = sch.run_continuous(sch.Engine(net, 10, 4), reqs, max_batch=4)  # forces a preemption
    chunked, _ = sch.run_continuous(sch.Engine(net, 64, 4), reqs, max_batch=4, chunk=7)  # prompts over several steps
    for r in reqs:
        plain = tiny.generate_no_cache(net, r.prompt, r.max_new)
        assert cont[r.rid].tokens == stat[r.rid].tokens == tight[r.rid].tokens == chunked[r.rid].tokens == plain, r.rid
    assert sum(rec.preempted for rec in tight.values()) >= 1 and max(len(r.prompt) for r in reqs) > 7
    m = sch.metrics(cont, reqs, cont_s)
    assert m["tokens"] == sum(r.max_new for r in reqs) and m["tokens_per_s"] > 0
    assert 0 <= m["ttft_p50"] <= m["ttft_p99"] and 0 <= m["tpot_p50"] <= m["tpot_p99"]


GRAPHS_GPU = r"""
from snippets.inference.paged_kv import model as tiny
from snippets.inference.serving import scheduler as sch

net = tiny.TinyDecoder(max_len=128, seed=0, device="cuda")
reqs = sch.trace(12, rate=0, seed=3, prompt_median=12, out_median=6, max_len=64)
eager, graphed = sch.Engine(net, 64, 4), sch.Engine(net, 64, 4, graphs=True)
for run in (sch.run_static, sch.run_continuous, lambda e, r, b: sch.run_continuous(e, r, b, chunk=7)):
    eager.reset()
    graphed.reset()
    want, _ = run(eager, reqs, 4)
    got, _ = run(graphed, reqs, 4)
    bad = [r.rid for r in reqs if got[r.rid].tokens != want[r.rid].tokens]
    assert not bad, bad
print("graphs", sorted(graphed.graphs))
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_cuda_graph_steps_give_the_eager_tokens():
    """Padded rows (every step pads its tokens to a power of two) must neither change a real row nor touch a
    request's blocks; the cache is reused across passes (reset), graphs and all. Compiled Triton, not the
    interpreter the other tests run under, so in a process of its own."""
    sizes = [int(x) for x in run_compiled(GRAPHS_GPU).split("graphs", 1)[1].strip(" []\n").split(",")]
    assert len(sizes) >= 2 and all(size >= 16 and size & (size - 1) == 0 for size in sizes)


def test_a_request_that_can_never_fit_is_refused():
    from snippets.inference.paged_kv import model as tiny
    from snippets.inference.serving import scheduler as sch

    net = tiny.TinyDecoder(max_len=128, seed=0)
    big = [sch.Request(0, 0.0, list(range(40)), 10)]
    with pytest.raises(ValueError, match="needs 13 blocks on its own; the cache has 8"):
        sch.run_continuous(sch.Engine(net, 8, 4), big, max_batch=2)


def test_trace_shape():
    from snippets.inference.serving import scheduler as sch

    reqs = sch.trace(500, rate=20.0, seed=3, max_len=512)
    arrivals = [r.arrival for r in reqs]
    assert arrivals == sorted(arrivals) and 15 < 500 / arrivals[-1] < 27  # Poisson at 20 per second
    assert all(1 <= len(r.prompt) <= 256 and 1 <= r.max_new <= 256 for r in reqs)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("m, n, k, group", [(1, 64, 256, 128), (3, 48, 256, 64), (5, 96, 128, 64), (16, 40, 256, 128),
                                            (33, 64, 128, 32)])
def test_weight_only_matmul_matches_dequantise_then_matmul(bits, dtype, m, n, k, group):
    from snippets.inference.serving import quant

    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g)
    x = torch.randn(m, k, generator=g).to(dtype)
    q, s = quant.quantize(w, bits, group)
    deq = quant.dequantize(q, s, bits, group)
    # the quantisation error, reported apart from the kernel's: at most half a step per element
    step = s.repeat_interleave(group, 1)
    assert ((deq - w).abs() <= step / 2 + 1e-6).all()
    ref = x.float() @ deq.to(dtype).float().T  # the kernel rounds the dequantised tile to x's dtype, sums in fp32
    splits = [1, 2] if k // 2 % min(128, group) == 0 else [1]
    ys = [quant.wq_matmul(x, q, s, bits, group, block_k=min(128, group), split_k=sk) for sk in splits]
    p = quant.pack_gemv(q, s, bits, group)
    if m <= quant.GEMV_MAX_ROWS:  # the CUDA-core kernel: whole K, K in 2 slices with prefetch, in 4 (twice)
        per = 32 // bits
        ys.append(quant.wq_gemv(x, p, block_n=16, step=per * 2, k_per_prog=k, num_warps=1))
        ys.append(quant.wq_gemv(x, p, block_n=32, step=group, k_per_prog=k // 2, num_warps=2, prefetch=True))
        for _ in range(2):  # the split-K workspace must be left zero for the next call
            ys.append(quant.wq_gemv(x, p, block_n=16, step=per * 4, k_per_prog=k // 4, num_warps=2))
        assert not (p.y32.any() or p.cnt.any())
    else:
        with pytest.raises(ValueError, match="CUDA-core kernel takes up to"):
            quant.wq_gemv(x, p)
    y = ys[-1]
    err = max(((t.float() - ref).norm() / ref.norm()).item() for t in ys)
    # bf16 keeps 8 bits of mantissa, and Triton's interpreter truncates where the GPU rounds: a few 1e-3
    assert y.dtype == dtype and err < {torch.bfloat16: 1e-2, torch.float16: 2e-3}[dtype], f"seed {seed}: kernel error {err}"


def test_int4_packing_round_trips_and_rejects_bad_shapes():
    from snippets.inference.serving import quant

    w = torch.arange(-8, 8, dtype=torch.float32).repeat(3, 2)  # [3, 32]: every int4 value, scale 8/7 per group
    q, s = quant.quantize(w, 4, 32)
    assert q.dtype == torch.uint8 and q.shape == (3, 16)
    assert torch.equal(torch.round(quant.dequantize(q, s, 4, 32) / s.repeat_interleave(32, 1)),
                       torch.round(w / s.repeat_interleave(32, 1)).clamp(-8, 7))
    with pytest.raises(ValueError, match="multiple of the group"):
        quant.quantize(torch.randn(2, 100), 4, 64)
    with pytest.raises(ValueError, match="bits must be 4 or 8"):
        quant.quantize(w, 3, 32)


def test_tiny_model_as_target_and_early_exit_draft():
    from snippets.inference.paged_kv import model as tiny
    from snippets.inference.serving import lm

    net = tiny.TinyDecoder(max_len=64, layers=4, seed=2)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    logits, _ = net.prefill(torch.tensor(prompt))
    assert torch.allclose(lm.forward_logits(net, prompt)[-1], logits, atol=1e-5)
    target, draft = lm.as_model(net), lm.as_model(net, layers=1)
    plain = tiny.generate_no_cache(net, prompt, 10)
    g = torch.Generator().manual_seed(0)
    stats = sp.Stats()
    assert sp.generate(target, draft, prompt, 10, 3, g, stats) == plain  # greedy: the draft changes speed only
    assert stats.rounds <= 10 and 0 <= stats.acceptance_rate <= 1


def test_markov_corpus_batched_forward_and_training():
    from snippets.inference.paged_kv import model as tiny
    from snippets.inference.serving import lm

    corpus = lm.markov_corpus(32, 64, 20, branching=2, seed=4)
    assert corpus.shape == (64, 20) and int(corpus.max()) < 32
    successors = {}
    for row in corpus.tolist():
        for a, b in zip(row, row[1:]):
            successors.setdefault(a, set()).add(b)
    assert max(len(s) for s in successors.values()) <= 2  # a sparse chain: at most `branching` successors
    net = tiny.TinyDecoder(vocab=32, dim=64, layers=2, max_len=32, seed=0)
    batch = corpus[:3, :12]
    together = lm.batched_logits(net, batch)
    for i in range(3):
        assert torch.allclose(together[i], lm.forward_logits(net, batch[i].tolist()), atol=1e-4)
    losses = lm.train(net, corpus, steps=40, batch=16)
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5  # it learns the chain
    assert not net.emb.requires_grad
    draft = tiny.TinyDecoder(vocab=32, dim=64, layers=1, max_len=32, seed=1)
    kl = lm.train(draft, corpus, steps=40, batch=16, teacher=net)
    assert kl[-1] < kl[0]


def test_serving_measurements_run_end_to_end_on_the_cpu():
    """The lab's measurement functions at toy sizes: every check inside them passes."""
    from snippets.inference.paged_kv import model as tiny
    from snippets.inference.serving import bench, lm
    from snippets.inference.serving import scheduler as sch

    corpus = lm.markov_corpus(64, 256, 33, seed=0)
    target = tiny.TinyDecoder(vocab=64, dim=64, layers=2, max_len=128, seed=0)
    lm.train(target, corpus, 10, batch=16)
    draft = tiny.TinyDecoder(vocab=64, dim=64, layers=1, max_len=128, seed=1)
    lm.train(draft, corpus, 10, batch=16, teacher=target)
    r = bench.spec_decode(target, draft, [corpus[0, :8].tolist()], 6, 2)
    assert 0 <= r["acceptance"] <= 1 and r["tokens_per_target_call"] >= 1 and r["speedup"] > 0
    r2 = bench.spec_decode(target, draft, [corpus[0, :8].tolist()], 6, 2, temperature=1.0, reps=2)
    assert 0 <= r2["acceptance"] <= 1 and r2["speedup"] > 0
    reqs = sch.trace(5, rate=0, seed=2, prompt_median=8, out_median=4, max_len=32, vocab=64)
    res = bench.batching(target, reqs, 3, 64, 4, chunk=5)
    assert res["continuous"]["tokens"] == res["static"]["tokens"] == sum(q.max_new for q in reqs)
    assert res["continuous, chunked prefill"]["tokens"] == res["static"]["tokens"]
    q = bench.quant_gemm(2, 64, 256, torch.bfloat16, "cpu")
    assert q["w4_quant_error"] > q["w8_quant_error"] > 0 and q["w8_config"] == ("mma", 64, 128, 4, 3, 1)
    q = bench.quant_gemm(8, 64, 256, torch.bfloat16, "cpu", configs=[("gemv", 16, 64, 128, 2, 0), ("mma", 32, 128, 4, 2, 1)])
    assert q["w8_config"] == q["w4_config"] == ("mma", 32, 128, 4, 2, 1)  # 8 rows: the CUDA-core one is not tried
    assert "w4_read_ms" not in q
    q = bench.quant_gemm(1, 64, 256, torch.float16, "cpu", configs=[("gemv", 16, 64, 128, 2, 0)])
    assert q["w4_config"] == ("gemv", 16, 64, 128, 2, 0) and q["w4_read_ms"] > 0 and q["w8_read_speedup"] > 0
    assert q["w4_same_bytes_ms"] > 0 and q["w8_same_bytes_speedup"] > 0
    # fp16 x: cuBLAS (here the CPU matmul) also in bf16, and the faster of the two is every speedup's baseline
    by_dtype = q["dense_by_dtype_ms"]
    assert set(by_dtype) == {"float16", "bfloat16"} and q["dense_dtype"] == min(by_dtype, key=by_dtype.get)
    assert q["dense_ms"] == min(by_dtype.values()) and q["w4_speedup"] == q["dense_ms"] / q["w4_ms"]
    from snippets.inference.serving import quant
    w8, s8 = quant.quantize(torch.randn(8, 256), 8, 128)
    with pytest.raises(ValueError, match="split into 3 slices"):
        quant.wq_matmul(torch.randn(1, 256).bfloat16(), w8, s8, 8, 128, split_k=3)
    with pytest.raises(ValueError, match="must be whole words and divide the group"):
        quant.wq_gemv(torch.randn(1, 256).bfloat16(), quant.pack_gemv(w8, s8, 8), step=96)


def test_read_words_reads_every_word():
    """The bound kernel's XOR over K equals numpy's: no load was dropped, whatever the grid."""
    import numpy as np

    from snippets.inference.serving import quant

    q, s = quant.quantize(torch.randn(48, 512), 4, 128)
    p = quant.pack_gemv(q, s, 4)
    want = torch.from_numpy(np.bitwise_xor.reduce(p.wt.numpy(), 0))
    for cfg in ((16, 64, 512, 1), (32, 128, 128, 2), (64, 32, 256, 2)):
        assert torch.equal(quant.read_words(p, 512, *cfg), want), cfg


GEMV_SM90 = r"""
import json, os, re, subprocess, sys, tempfile
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from snippets.inference.serving import quant
from tests.sass_loop import loop_ops

fn, out = quant._wq_gemv_kernel, []
for bits, bn, step, warps, prefetch, paired in json.loads(sys.argv[1]):
    cfg = dict(GROUP=128, BITS=bits, MP=1, BLOCK_N=bn, R=step * bits // 32, PREFETCH=prefetch, SPLIT=True,
               PAIRED=paired)
    half = "*fp16" if paired else "*bf16"
    ptrs = {"X": "*i32" if paired else half, "Wt": "*i32", "St": "*fp32", "Y": half, "Y32": "*fp32", "CNT": "*i32"}
    sig, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in cfg:
            sig[name], consts[name] = "constexpr", cfg[name]
        else:
            sig[name] = ptrs.get(name, "i32")
            if name != "ONE":
                attrs[(i,)] = [["tt.divisibility", 16]]
    c = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    d = tempfile.mkdtemp()
    open(os.path.join(d, "k.cubin"), "wb").write(c.asm["cubin"])
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    sass = subprocess.run([tool, "-sass", os.path.join(d, "k.cubin")], capture_output=True, text=True, check=True).stdout
    ops = loop_ops(sass)  # the K loop
    ttgir, ptx = c.asm["ttgir"], c.asm["ptx"]
    marks = [r"atom\.global\.gpu\.relaxed\.add\.f32", r"bar\.sync", r"atom\.global\.gpu\.acq_rel\.add\.u32",
             r"bar\.sync", r"ld\.global\.cg"]
    order, at = [], 0
    for mark in marks:  # each after the previous one: the split-K hand-off's ordering
        hit = re.compile(mark).search(ptx, at)
        order.append(hit is not None)
        at = hit.end() if hit else at
    out.append({"cfg": [bits, bn, step, warps, prefetch, paired], "weights": bn * step / (32 * warps), "ops": ops, "order": order,
                "total": sum(ops.values()),
                "converts_in_loop": ttgir[ttgir.find("scf.for"):ttgir.find("scf.yield")].count("convert_layout")})
print(json.dumps(out))
"""


def _compile_gemv_sm90(cases) -> list[dict]:
    """GEMV_SM90 in a subprocess without the interpreter: one row of SASS counts per case."""
    return json.loads(run_compiled(GEMV_SM90, json.dumps(cases)))


def test_gemv_compiles_for_sm90_to_a_lean_loop():
    """The W4/W8 GEMV compiled for an H200 without one: per weight one LOP3 (the mask and 1.0's exponent
    together), at least one FMA, no int-to-float conversion and no spills; and the split-K hand-off in order:
    relaxed fp32 adds, a CTA barrier, the counter's acq_rel add at GPU scope, a barrier, then the sums read from
    L2. The interpreter runs the same code but would not see any of this."""
    cases = [[4, 64, 64, 2, 0, 0], [8, 64, 64, 4, 1, 0]]  # (bits, BLOCK_N, step, warps, prefetch, paired)
    for row in _compile_gemv_sm90(cases):
        ops, weights = row["ops"], row["weights"]
        assert ops.get("LOP3", 0) <= 1.1 * weights and ops.get("FFMA", 0) >= weights, row
        assert not any(op in ops for op in ("I2F", "LDL", "STL")), row
        assert all(row["order"]), row
        # compiled with Triton 3.6: 4.5 (W4) and 5.75 (W8, with the prefetch's extra address arithmetic) per weight;
        # with 1.0's exponent as an immediate (two LOP3s per weight) an earlier kernel took 5.7 and 6.1
        assert row["total"] <= {4: 5.0, 8: 6.25}[row["cfg"][0]] * weights, row


def test_rotation_spans_four_l2s_and_times_every_copy(monkeypatch):
    from types import SimpleNamespace

    from snippets.common.timing import copies_for, l2_bytes
    from snippets.inference.serving import bench

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: SimpleNamespace(L2_cache_size=50_000_000))
    assert copies_for(33_500_000, l2_bytes("cuda")) == 6 and copies_for(470_000_000, l2_bytes("cuda")) == 2
    assert copies_for(33_500_000, l2_bytes("cpu")) == 1
    calls = [0, 0, 0]

    def bump(i):
        calls[i] += 1
    ms = bench.rotated_ms([lambda i=i: bump(i) for i in range(3)], "cpu")
    assert ms >= 0 and min(calls) >= 1 and len(set(calls)) == 1


def test_paired_gemv_compiles_to_two_weights_per_instruction():
    """The f16x2 path for sm_90: per two weights one LOP3 (int4) or PRMT (int8) and one HFMA2 or HMUL2 (the HSUB2
    may compile to either HADD2 or HFMA2), no int-to-float conversion, no spills, and about a third fewer
    instructions than fp32's."""
    cases = [[4, 64, 64, 2, 0, 1], [8, 64, 64, 2, 0, 1], [4, 128, 128, 4, 1, 1]]
    for row in _compile_gemv_sm90(cases):
        ops, weights, bits = row["ops"], row["weights"], row["cfg"][0]
        assert ops.get("LOP3", 0) + ops.get("PRMT", 0) <= 0.55 * weights, row
        assert ops.get("HFMA2", 0) + ops.get("HMUL2", 0) + ops.get("HADD2", 0) >= weights, row  # mul/fma + sub
        assert ops.get("FFMA", 0) + ops.get("FADD", 0) <= 0.5 * weights, row  # fp32 only once per word
        assert not any(op in ops for op in ("I2F", "LDL", "STL")), row
        assert all(row["order"]), row
        # compiled with Triton 3.6: 2.9 to 3.02 (W4) and 3.84 (W8) per weight, against 4.5 and 5.75 in fp32
        assert row["total"] <= {4: 3.15, 8: 4.0}[bits] * weights, row


@pytest.mark.parametrize("bits", [4, 8])
def test_paired_words_give_neighbouring_weights_to_one_lop3_or_prmt(bits):
    """What the f16x2 path's PTX does to a paired word, in numpy: field pair j, put under fp16's exponent of 1024 by
    one LOP3 (int4) or one byte permute (int8) and offset back in f16x2 arithmetic, is the weights
    k = per * w + 2j and 2j + 1, exactly."""
    import numpy as np

    from snippets.inference.serving import quant

    q, s = quant.quantize(torch.randn(24, 256), bits, 128)
    p = quant.pack_gemv(q, s, bits, paired=True)
    want = torch.round(quant.dequantize(q, s, bits) / s.repeat_interleave(128, 1)).T.numpy()  # [K, N] values
    words, per = p.wt.numpy().view(np.uint32), 32 // bits

    def halves(t):
        return t.astype(np.uint32).view(np.float16).reshape(*words.shape, 2)

    for j in range(per // 2):
        if bits == 4:  # low nibble pairs (even j) minus 1032; high nibble pairs in place, times 1/16 minus 72
            mask = np.uint32(0x00F000F0 if j % 2 else 0x000F000F)
            t = (words >> np.uint32(8 * (j // 2))) & mask | np.uint32(0x64006400)
            h = halves(t) * np.float16(1 / 16) - np.float16(72) if j % 2 else halves(t) - np.float16(1032)
        else:  # prmt selectors 0x4140 and 0x4342: bytes 2j and 2j + 1, each under the byte 0x64, minus 1152
            lo, hi = (words >> np.uint32(16 * j)) & np.uint32(0xFF), (words >> np.uint32(16 * j + 8)) & np.uint32(0xFF)
            h = halves(lo | (hi << np.uint32(16)) | np.uint32(0x64006400)) - np.float16(1152)
        assert h.dtype == np.float16
        assert np.array_equal(h[..., 0], want[2 * j::per]) and np.array_equal(h[..., 1], want[2 * j + 1::per])
    with pytest.raises(ValueError, match="fp16 x on a GPU"):
        quant.wq_gemv(torch.randn(1, 256).bfloat16(), p, k_per_prog=256)


def test_batching_times_passes_in_turns_and_takes_medians(monkeypatch):
    from snippets.inference.serving import bench
    from snippets.inference.serving import scheduler as sch

    reqs = [sch.Request(0, 0.0, [1], 2)]
    rec = {0: sch.Record(tokens=[5, 6], first=0.1, done=0.2)}
    order, seconds = [], {"continuous": iter([9.0, 1.0, 2.0, 4.0]), "static": iter([9.0, 4.0, 2.0, 16.0])}

    def fake(name):
        def run(engine, requests, max_batch):
            order.append(name)
            return rec, next(seconds[name])
        return run
    monkeypatch.setattr(sch, "run_continuous", fake("continuous"))
    monkeypatch.setattr(sch, "run_static", fake("static"))
    resets = []
    monkeypatch.setattr(sch, "Engine", lambda *a, **k: SimpleNamespace(reset=lambda: resets.append(1)))
    res = bench.batching(None, reqs, 1, 4, reps=3, graphs=False)
    assert len(resets) == len(order)  # each pass starts from an empty cache
    assert order == ["continuous", "static"] * 4  # an untimed pass, then three in turns
    # ratios within a pass 4/1, 2/2, 16/4: median 4 (the ratio of the median passes would be 4/2); each scheduler
    # reports its median pass by tokens/s
    assert res["throughput_ratio"] == 4.0
    assert (res["continuous"]["seconds"], res["static"]["seconds"]) == (2.0, 4.0)


def test_a_step_costs_the_same_ops_whatever_it_holds():
    """Prompt tokens attend through the paged kernel as rows of their own, so a step that carries whole prompts and
    a later chunk runs the very ops of a decode-only step."""
    from torch.profiler import ProfilerActivity, profile

    from snippets.inference.paged_kv import model as tiny
    from snippets.inference.serving import scheduler as sch

    net = tiny.TinyDecoder(max_len=128, seed=0)
    eng = sch.Engine(net, 64, 4)
    reqs = sch.trace(5, rate=0, seed=2, prompt_median=12, out_median=5, max_len=64)
    for r in reqs[:2]:
        eng.admit(r.rid, r.prompt)
    firsts, _ = eng.step([(r.rid, 0, len(r.prompt)) for r in reqs[:2]], [])

    def ops(chunks, decodes):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            eng.step(chunks, decodes)
        return sorted((e.key, e.count) for e in prof.key_averages() if e.key.startswith("aten::"))

    decode_only = ops([], [(r.rid, firsts[r.rid]) for r in reqs[:2]])
    for r in reqs[2:]:
        eng.admit(r.rid, r.prompt)
    half = len(reqs[4].prompt) // 2
    mixed = ops([(reqs[2].rid, 0, len(reqs[2].prompt)), (reqs[3].rid, 0, len(reqs[3].prompt)), (reqs[4].rid, 0, half)],
                [(r.rid, 1) for r in reqs[:2]])
    assert mixed == decode_only and len(decode_only) > 5


def test_step_bound_counts_the_steps_of_each_scheduler():
    from snippets.inference.serving.scheduler import Request, step_bound

    same = [Request(i, 0.0, [1], 5) for i in range(4)]
    assert step_bound(same, 4, 0.01)["ratio"] == pytest.approx(1.0)  # one full batch of equal requests: no gain
    # max batch 2, lengths 4, 1, 1, 1: static runs [4, 1] for 4 steps, then [1, 1] for 1; continuous refills the
    # short request's slot every step and is done after 4
    mixed = [Request(i, 0.0, [1], n) for i, n in enumerate([4, 1, 1, 1])]
    r = step_bound(mixed, 2, 0.5)
    assert (r["static_s"], r["continuous_s"], r["ratio"]) == (2.5, 2.0, 1.25)
    late = [Request(0, 0.0, [1], 2), Request(1, 10.0, [1], 2)]  # idle until the second arrives
    assert step_bound(late, 2, 1.0)["continuous_s"] == step_bound(late, 2, 1.0)["static_s"] == 12.0
