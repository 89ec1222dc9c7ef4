"""One Triton GEMM, C = A @ B, with optional fused work at either end of it:

    epilogue  bias + GELU on the fp32 accumulator before the single store of C   (fusion that wins)
    prologue  GELU applied to each A tile as it is loaded, inside the K loop      (recomputed N / BLOCK_N times)
    row norm  RMSNorm of each output row, which needs the whole row in one tile   (forces BLOCK_N >= N)

and the unfused forms they replace. GELU is the tanh form (F.gelu(approximate="tanh")). A is [M, K], B is
[K, N] (pass w.t() for a [N, K] weight), bias and the norm weight [N]; arithmetic is fp32.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from snippets.common.checks import empty  # every output is allocated here: checks can poison them all
from snippets.common.tiles import Config  # tile M x N x K, warps, stages, group
from snippets.fusion.add_layernorm import cast


# candidates a tuner picks from on a GPU (tile M x N x K, warps, pipeline stages); the last one fits the 64 KiB
# of shared memory of a T4; the interpreter takes SMOKE
CONFIGS = [Config(128, 256, 64, 8, 3), Config(128, 128, 64, 8, 3), Config(128, 128, 64, 4, 4),
           Config(256, 128, 64, 8, 3), Config(64, 128, 64, 4, 4), Config(128, 64, 64, 4, 4), Config(64, 64, 32, 4, 2)]
SMOKE = Config(32, 32, 32, 4, 1)


def row_norm_configs(n: int) -> list[Config]:
    """Tiles that hold a whole output row of n: BLOCK_N = next power of two, so shared memory caps BLOCK_K
    and registers cap BLOCK_M (the fp32 accumulator is BLOCK_M x BLOCK_N)."""
    bn = triton.next_power_of_2(n)
    return [Config(bm, bn, bk, w, s) for bm, bk, w, s in
            [(16, 16, 4, 2), (16, 32, 8, 2), (32, 16, 8, 2), (32, 32, 8, 2), (64, 16, 8, 2)]]


@triton.jit
def _gelu(v):  # 0.5 v (1 + tanh(z)) = v * sigmoid(2z), z = sqrt(2 / pi) (v + 0.044715 v^3)
    return v * tl.sigmoid(1.5957691216057308 * (v + 0.044715 * v * v * v))


@triton.jit
def _gemm_kernel(A, B, C, Bias, W, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, eps,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 BIAS: tl.constexpr, GELU: tl.constexpr, PROLOGUE_GELU: tl.constexpr, ROW_NORM: tl.constexpr,
                 DOT_FP32: tl.constexpr):
    # grouped launch order: GROUP_M row blocks share their B column blocks while those are still in L2
    pid = tl.program_id(0)
    blocks_m, blocks_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    first_m = (pid // (GROUP_M * blocks_n)) * GROUP_M
    group_m = min(blocks_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * blocks_n)) % group_m
    pid_n = (pid % (GROUP_M * blocks_n)) // group_m

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = A + rm.to(tl.int64)[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = B + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k) & (rn[None, :] < N), other=0.0)
        if PROLOGUE_GELU:  # every program along N redoes this for the same A tile
            a = cast(_gelu(a.to(tl.float32)), A.dtype.element_ty)
        if DOT_FP32:  # the interpreter: see launch()
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    col_ok = rn < N
    if BIAS:
        acc += tl.load(Bias + rn, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if GELU:
        acc = _gelu(acc)
    if ROW_NORM:  # the launcher guarantees BLOCK_N >= N: this tile holds whole rows (columns past N are 0)
        rstd = 1.0 / tl.sqrt(tl.sum(acc * acc, axis=1) / N + eps)
        acc = acc * rstd[:, None] * tl.load(W + rn, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    c_ptrs = C + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, cast(acc, C.dtype.element_ty), mask=(rm[:, None] < M) & col_ok[None, :])


# Triton 3.6's interpreter gets tl.dot wrong for bf16 operands; there the kernel multiplies them as fp32, which
# is what tensor cores do with bf16 (products exact, fp32 sums). Compiled kernels never take this branch.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def launch(a, b, bias=None, gelu=False, prologue_gelu=False, norm_weight=None, eps=1e-6, config: Config = SMOKE):
    """(C, the compiled kernel or None in the interpreter). norm_weight turns on the fused RMSNorm of each row."""
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    if norm_weight is not None and config.block_n < n:
        raise ValueError(f"a fused row norm needs BLOCK_N >= N = {n}, the config has {config.block_n}")
    c = empty((m, n), a.dtype, a.device)
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    kernel = _gemm_kernel[grid](
        a, b, c, bias if bias is not None else c, norm_weight if norm_weight is not None else c, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), eps,
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        BIAS=bias is not None, GELU=gelu, PROLOGUE_GELU=prologue_gelu, ROW_NORM=norm_weight is not None,
        DOT_FP32=INTERPRETED, num_warps=config.num_warps, num_stages=config.num_stages)
    return c, kernel


def gemm(a, b, bias=None, gelu=False, prologue_gelu=False, norm_weight=None, eps=1e-6, config: Config = SMOKE):
    return launch(a, b, bias, gelu, prologue_gelu, norm_weight, eps, config)[0]


# --8<-- [start:unfused]
def bias_gelu_unfused(a, b, bias):
    """What eager PyTorch runs for gelu(a @ b + bias): cuBLAS, then an add kernel, then a GELU kernel."""
    return F.gelu(a @ b + bias, approximate="tanh")


def bias_gelu_addmm(a, b, bias):
    """cuBLAS with the bias in its own epilogue (addmm), then a GELU kernel: two kernels."""
    return F.gelu(torch.addmm(bias, a, b), approximate="tanh")


def bias_gelu_cublaslt(a, b, bias):
    """One cuBLASLt call with bias and GELU in its epilogue (CUBLASLT_EPILOGUE_GELU_BIAS; CUDA only)."""
    return torch._addmm_activation(bias, a, b, use_gelu=True)


def gemm_ref(a, b, bias=None, gelu=False, prologue_gelu=False, norm_weight=None, eps=1e-6):
    """fp64 reference; the prologue's GELU output is rounded to A's dtype, as the kernel feeds it to tl.dot."""
    a64 = a.double()
    if prologue_gelu:
        a64 = F.gelu(a64, approximate="tanh").to(a.dtype).double()
    c = a64 @ b.double()
    if bias is not None:
        c = c + bias.double()
    if gelu:
        c = F.gelu(c, approximate="tanh")
    if norm_weight is not None:
        c = F.rms_norm(c, (c.shape[-1],), norm_weight.double(), eps)
    return c
# --8<-- [end:unfused]


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2 * m * n * k / (ms * 1e-3) / 1e12
