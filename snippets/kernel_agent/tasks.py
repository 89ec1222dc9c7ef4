"""Twelve tasks at KernelBench-like levels 1 (one operator) and 2 (a fusion), with shapes from public models.

Tolerances are against an fp64 reference. bf16 rounds at 2**-8 ~ 4e-3 relative and tf32 at 2**-11 ~ 5e-4,
so rtol 1e-5 rejects a kernel that computes or stores in either, while an fp32 kernel's error (~1e-7 per op)
stays far below. A GEMM's fp32 sum over K rounds at the size of the running sum: summed one product at a
time, K = 4096 of inputs up to |2| reaches ~1e-3 absolute, so its atol is 3e-3 (tests/test_kernel_agent.py).
Timing shapes: rows of 8192 tokens; widths 4096 (Llama-3.1-8B hidden), 14336 (its MLP) and 128256 (its
vocabulary, cut to 32768 to bound memory); attention with head dim 64 (GPT-2 and Llama-3.2-1B).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from snippets.kernel_agent.spec import Task

ROWS = {"smoke": {"M": (1, 24), "N": (1, 300)}, "full": {"M": (1, 4096), "N": (1, 8192)}}
EXAMPLE = {"M": 32, "N": 128}


def _rows(name, ref, base, bench, atol, rtol, level=1, banned=(), out=lambda s: (s["M"], s["N"]), **kw) -> Task:
    example = kw.pop("example", EXAMPLE)
    return Task(name=name, reference=ref, baseline=base, arrays=kw.pop("arrays", lambda s: {"x": (s["M"], s["N"])}),
                dims=kw.pop("dims", ROWS), example=example, bench={"smoke": example, "full": bench}, out_shape=out,
                atol=atol, rtol=rtol, level=level, banned_ops=frozenset(banned), **kw)


def softmax_reference(x):
    return torch.softmax(x, dim=-1)


def softmax_baseline(x):
    return torch.softmax(x, dim=-1)


def add_rmsnorm_reference(x, residual, weight, eps=1e-6):
    h = x + residual
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight


def add_rmsnorm_baseline(x, residual, weight, eps=1e-6):  # unfused eager: one kernel per op
    h = x + residual
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight


def gemm_gelu_reference(a, b, bias):
    return F.gelu(a @ b + bias)


def gemm_gelu_baseline(a, b, bias):  # cuBLAS GEMM, then bias and GELU as separate kernels
    return F.gelu(torch.mm(a, b) + bias)


def layernorm_reference(x, weight, bias):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps=1e-5)


def layernorm_baseline(x, weight, bias):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps=1e-5)


def l2norm_reference(x):
    return F.normalize(x, dim=-1, eps=1e-12)


def l2norm_baseline(x):
    return F.normalize(x, dim=-1, eps=1e-12)


def row_sum_reference(x):
    return x.sum(-1)


def row_sum_baseline(x):
    return x.sum(-1)


def cross_entropy_reference(logits, target):
    return torch.logsumexp(logits, -1) - logits.gather(-1, target[:, None])[:, 0]


def cross_entropy_baseline(logits, target):
    return F.cross_entropy(logits, target, reduction="none")


def topk_reference(x):
    return torch.topk(x, 8, dim=-1).values


def topk_baseline(x):
    return torch.topk(x, 8, dim=-1).values


def swiglu_reference(a, b):
    return F.silu(a) * b


def swiglu_baseline(a, b):
    return F.silu(a) * b


def rotary_reference(x, cos, sin):  # GPT-NeoX layout: the two halves of each head are rotated together
    x1, x2 = x.chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def rotary_baseline(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def attention_reference(q, k, v):  # causal, one head per batch entry
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    mask = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool, device=q.device).tril()
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v


def attention_baseline(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def matmul_reference(a, b):
    return a @ b


def matmul_baseline(a, b):
    return torch.mm(a, b)


GEMM_DIMS = {"smoke": {"M": (1, 40), "N": (1, 40), "K": (1, 48)},
             "full": {"M": (1, 4096), "N": (1, 4096), "K": (1, 4096)}}
GEMM = dict(dims=GEMM_DIMS, example={"M": 32, "N": 32, "K": 32}, out=lambda s: (s["M"], s["N"]))
TASKS = {t.name: t for t in [
    _rows("softmax", softmax_reference, softmax_baseline, {"M": 8192, "N": 8192}, 1e-6, 1e-5,
          banned={"softmax", "log_softmax", "exp"}),
    _rows("add_rmsnorm", add_rmsnorm_reference, add_rmsnorm_baseline, {"M": 8192, "N": 4096}, 1e-5, 1e-5,
          level=2, banned={"rms_norm", "layer_norm", "rsqrt"},
          arrays=lambda s: {"x": (s["M"], s["N"]), "residual": (s["M"], s["N"]), "weight": (s["N"],)}),
    _rows("gemm_bias_gelu", gemm_gelu_reference, gemm_gelu_baseline, {"M": 4096, "N": 4096, "K": 1024}, 3e-3, 1e-4,
          level=2, banned={"gelu", "erf", "mm", "matmul"},
          arrays=lambda s: {"a": (s["M"], s["K"]), "b": (s["K"], s["N"]), "bias": (s["N"],)}, **GEMM),
    _rows("layernorm", layernorm_reference, layernorm_baseline, {"M": 8192, "N": 4096}, 1e-5, 1e-4,
          banned={"layer_norm"}, arrays=lambda s: {"x": (s["M"], s["N"]), "weight": (s["N"],), "bias": (s["N"],)}),
    _rows("l2norm", l2norm_reference, l2norm_baseline, {"M": 8192, "N": 4096}, 1e-6, 1e-5, banned={"normalize"}),
    _rows("row_sum", row_sum_reference, row_sum_baseline, {"M": 8192, "N": 8192}, 1e-3, 1e-5, banned={"sum"},
          out=lambda s: (s["M"],)),
    _rows("cross_entropy", cross_entropy_reference, cross_entropy_baseline, {"M": 4096, "N": 32768}, 1e-5, 1e-5,
          level=2, banned={"cross_entropy", "logsumexp"}, out=lambda s: (s["M"],),
          arrays=lambda s: {"x": (s["M"], s["N"]), "target": (s["M"],)}, ints={"target": lambda s: (0, s["N"])}),
    _rows("topk", topk_reference, topk_baseline, {"M": 8192, "N": 4096}, 0.0, 0.0, banned={"topk", "sort"},
          dims={"smoke": {"M": (1, 24), "N": (8, 300)}, "full": {"M": (1, 4096), "N": (8, 8192)}},
          out=lambda s: (s["M"], 8)),
    _rows("swiglu", swiglu_reference, swiglu_baseline, {"M": 8192, "N": 14336}, 1e-6, 1e-5, level=2,
          banned={"silu", "sigmoid"}, arrays=lambda s: {"a": (s["M"], s["N"]), "b": (s["M"], s["N"])}),
    _rows("rotary", rotary_reference, rotary_baseline, {"T": 8192, "H": 32, "D2": 64}, 2e-5, 1e-5, level=2,
          dims={"smoke": {"T": (1, 40), "H": (1, 4), "D2": (1, 32)}, "full": {"T": (1, 8192), "H": (1, 32),
                                                                              "D2": (1, 128)}},
          example={"T": 16, "H": 2, "D2": 8}, out=lambda s: (s["T"], s["H"], 2 * s["D2"]),
          arrays=lambda s: {"x": (s["T"], s["H"], 2 * s["D2"]), "cos": (s["T"], s["D2"]), "sin": (s["T"], s["D2"])}),
    _rows("attention", attention_reference, attention_baseline, {"B": 32, "T": 2048, "D": 64}, 2e-5, 1e-4, level=2,
          banned={"scaled_dot_product_attention", "softmax", "bmm"},
          dims={"smoke": {"B": (1, 3), "T": (1, 80), "D": (16, 16)}, "full": {"B": (1, 64), "T": (1, 4096),
                                                                               "D": (64, 64)}},
          example={"B": 2, "T": 32, "D": 16}, out=lambda s: (s["B"], s["T"], s["D"]),
          arrays=lambda s: {"q": (s["B"], s["T"], s["D"]), "k": (s["B"], s["T"], s["D"]),
                            "v": (s["B"], s["T"], s["D"])}),
    _rows("matmul", matmul_reference, matmul_baseline, {"M": 4096, "N": 4096, "K": 4096}, 3e-3, 1e-4,
          banned={"mm", "matmul"}, arrays=lambda s: {"a": (s["M"], s["K"]), "b": (s["K"], s["N"])}, **GEMM),
]}
