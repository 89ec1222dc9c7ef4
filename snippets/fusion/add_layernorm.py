"""Fused dropout + residual add + LayerNorm (or RMSNorm) in Triton, forward and backward.

    h = dropout(x) + residual      written (residual's dtype): the next block's residual, backward's input
    y = norm(h) * weight + bias    of h as stored, as unfused code does; mean and rstd (fp32) saved

A program owns BLOCK_M whole rows, so x, residual, y and h each cross device memory once. The dropout
mask is never stored: element (row, col) is kept iff u >= p, where

    w = philox4x32_10(key=seed, counter=(col // 8, row, 0, 0))[(col % 8) // 2]
    u = (w & 0xFFFF if col % 2 == 0 else w >> 16) * 2**-16

One Philox call serves eight columns, 16 bits each (p is resolved to 2**-16), which halves the Philox work
per element against one 32-bit word each. Backward, `dropout_mask` and the CUDA kernel (csrc/philox.cuh)
regenerate the same u. Inputs may be fp32 or bf16; arithmetic is fp32.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from snippets.common.checks import empty  # every output is allocated here: checks can poison them all

MAX_N = 16384  # a row lives in registers as fp32 (64 KB per program); wider rows would spill


# backward launch by BLOCK_N: (rows per step, num_warps, programs per SM), the fastest of a sweep over 1-16 rows,
# 4-32 warps and 1-8 programs per SM on an H200 (Triton 3.6) among those that compile without spills for sm_90a
# with dropout on; at 16384 every choice spills (notebooks/02-kernel-fusion.ipynb reruns the sweep)
_BWD = {1024: (4, 4, 8), 2048: (2, 4, 8), 4096: (1, 16, 2), 8192: (1, 32, 1), 16384: (1, 16, 1)}


def _config(n: int, backward: bool = False) -> tuple[int, int, int]:
    """(BLOCK_M rows per program step, BLOCK_N >= n, num_warps)."""
    if n > MAX_N:
        raise ValueError(f"hidden size {n} is over {MAX_N}")
    block_n = max(triton.next_power_of_2(n), 8)  # one Philox call per 8 columns
    if backward:
        block_m, warps, _ = _BWD.get(block_n, (min(16, 4096 // block_n), 4, 8))
        return block_m, block_n, warps
    block_m = max(1, min(16, 4096 // block_n))
    # forward: one warp per 1024 elements of the tile, 4 to 16 (the same sweep's best at every size it tried)
    return block_m, block_n, min(max(block_m * block_n // 1024, 1), 16)


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    t = t.reshape(-1, t.shape[-1])
    return t if t.stride(-1) == 1 else t.contiguous()


@triton.jit
def cast(v, dtype: tl.constexpr):
    # fp32 -> bf16 rounding to nearest even, by hand: Triton 3.6's interpreter truncates instead, and the
    # CPU tests should see the bits the GPU stores (there this equals a plain cast)
    if dtype == tl.bfloat16:
        bits = v.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        v = tl.where(v == v, bits.to(tl.float32, bitcast=True), v)
    return v.to(dtype)


# --8<-- [start:philox]
@triton.jit
def _uniform(seed, rows, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    groups = tl.arange(0, BLOCK_N // 8)
    c0 = (tl.zeros([BLOCK_M, BLOCK_N // 8], tl.int32) + groups[None, :]).to(tl.uint32)
    c1 = (tl.zeros([BLOCK_M, BLOCK_N // 8], tl.int32) + rows[:, None]).to(tl.uint32)
    zero = c0 * 0
    r0, r1, r2, r3 = tl.philox(seed, c0, c1, zero, zero)
    # column 8g + j takes half j % 2 (low first) of word r_(j // 2)[g]: join puts each new axis innermost,
    # so the flat index 4a + 2b + c picks word 2a + b, half c
    lo = tl.join(tl.join(r0 & 0xFFFF, r2 & 0xFFFF), tl.join(r1 & 0xFFFF, r3 & 0xFFFF))
    hi = tl.join(tl.join(r0 >> 16, r2 >> 16), tl.join(r1 >> 16, r3 >> 16))
    r = tl.reshape(tl.join(lo, hi), [BLOCK_M, BLOCK_N])
    return r.to(tl.float32) * (1.0 / 65536.0)  # 16 bits: exact in fp32, in every language


@triton.jit
def _dropout_kernel(Out, M, N, p, seed, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, UNIFORM: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    u = _uniform(seed, rows, BLOCK_M, BLOCK_N)
    out = u if UNIFORM else (u >= p).to(tl.int8)
    tl.store(Out + rows.to(tl.int64)[:, None] * N + cols[None, :], out, mask=mask)
# --8<-- [end:philox]


def _dropout_stream(seed: int, shape, p: float, device, uniform: bool) -> torch.Tensor:
    _check(p, seed)
    m, n = math.prod(shape[:-1]), shape[-1]
    out = empty((m, n), torch.float32 if uniform else torch.int8, device)
    block_m, block_n, num_warps = _config(n)
    _dropout_kernel[(triton.cdiv(m, block_m),)](out, m, n, p, seed, BLOCK_M=block_m, BLOCK_N=block_n,
                                                UNIFORM=uniform, num_warps=num_warps)
    return out.reshape(shape)


def dropout_uniform(seed: int, shape, device="cpu") -> torch.Tensor:
    """The u that the fused kernels draw for an input of `shape` (rows = all leading dims)."""
    return _dropout_stream(seed, shape, 0.0, device, uniform=True)


def dropout_mask(seed: int, shape, p: float, device="cpu") -> torch.Tensor:
    """The keep mask (bool) that the fused kernels apply for this seed and p."""
    return _dropout_stream(seed, shape, p, device, uniform=False).bool()


# --8<-- [start:fwd]
@triton.jit
def _fwd_kernel(X, R, W, B, Y, H, Mean, Rstd, stride_x, stride_r, stride_y, stride_h, M, N, eps, p, scale, seed,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, RMS: tl.constexpr,
                DROPOUT: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_ok = rows < M
    mask = row_ok[:, None] & (cols[None, :] < N)
    r64 = rows.to(tl.int64)[:, None]
    x = tl.load(X + r64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    r = tl.load(R + r64 * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if DROPOUT:
        x = tl.where(_uniform(seed, rows, BLOCK_M, BLOCK_N) >= p, x * scale, 0.0)
    h = cast(x + r, H.dtype.element_ty)
    tl.store(H + r64 * stride_h + cols[None, :], h, mask=mask)
    h = h.to(tl.float32)  # normalise h as stored: what unfused code does, and what backward reads

    if RMS:
        hc = h
    else:
        mean = tl.sum(h, axis=1) / N
        tl.store(Mean + rows, mean, mask=row_ok)
        hc = tl.where(mask, h - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(hc * hc, axis=1) / N + eps)
    tl.store(Rstd + rows, rstd, mask=row_ok)

    w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
    y = hc * rstd[:, None] * w[None, :]
    if HAS_BIAS:
        y += tl.load(B + cols, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    tl.store(Y + r64 * stride_y + cols[None, :], cast(y, Y.dtype.element_ty), mask=mask)
# --8<-- [end:fwd]


@triton.jit
def _bwd_kernel(DY, H, DHO, W, Mean, Rstd, DX, DR, DW, DB, stride_dy, stride_h, stride_dho, stride_dx, stride_dr,
                M, N, p, scale, seed, rows_per_program,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, RMS: tl.constexpr,
                DROPOUT: tl.constexpr, HAS_DHO: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], tl.float32)
    db = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, rows_per_program, BLOCK_M):
        rows = pid * rows_per_program + start + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        r64 = rows.to(tl.int64)[:, None]
        h = tl.load(H + r64 * stride_h + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + r64 * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)
        if RMS:
            xhat = h * rstd[:, None]
        else:
            mean = tl.load(Mean + rows, mask=row_ok, other=0.0)
            xhat = tl.where(mask, (h - mean[:, None]) * rstd[:, None], 0.0)
        wdy = w[None, :] * dy
        c1 = tl.sum(xhat * wdy, axis=1) / N
        if RMS:
            dh = (wdy - xhat * c1[:, None]) * rstd[:, None]
        else:
            c2 = tl.sum(wdy, axis=1) / N
            dh = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
        if HAS_DHO:
            dh += tl.load(DHO + r64 * stride_dho + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dw += tl.sum(dy * xhat, axis=0)
        if HAS_BIAS:
            db += tl.sum(dy, axis=0)
        tl.store(DR + r64 * stride_dr + cols[None, :], cast(dh, DR.dtype.element_ty), mask=mask)
        if DROPOUT:
            dh = tl.where(_uniform(seed, rows, BLOCK_M, BLOCK_N) >= p, dh * scale, 0.0)
        tl.store(DX + r64 * stride_dx + cols[None, :], cast(dh, DX.dtype.element_ty), mask=mask)
    # one row of partial sums per program; the host adds the rows (FlashAttention's layer_norm does the same)
    tl.store(DW + pid * N + cols, dw, mask=col_ok)
    if HAS_BIAS:
        tl.store(DB + pid * N + cols, db, mask=col_ok)


def _check(p: float, seed: int):
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p must be in [0, 1), got {p}")
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be in [0, 2**63), got {seed}")


def add_layernorm_fwd(x, residual, weight, bias=None, eps=1e-5, p=0.0, seed=0, rms=False, config=None):
    """(y, h, mean, rstd) with y and h shaped [rows, N]; mean is None for RMSNorm. config: (BLOCK_M, num_warps)
    in place of _config's choice."""
    _check(p, seed)
    x2, r2 = _as_rows(x), _as_rows(residual)
    m, n = x2.shape
    y = empty((m, n), x.dtype, x.device)
    h = empty((m, n), residual.dtype, x.device)
    rstd = empty((m,), torch.float32, x.device)
    mean = None if rms else empty((m,), torch.float32, x.device)
    block_m, block_n, num_warps = _config(n)
    block_m, num_warps = config or (block_m, num_warps)
    _fwd_kernel[(triton.cdiv(m, block_m),)](
        x2, r2, weight, weight if bias is None else bias, y, h, rstd if rms else mean, rstd,
        x2.stride(0), r2.stride(0), y.stride(0), h.stride(0), m, n, eps, p, 1.0 / (1.0 - p), seed,
        BLOCK_M=block_m, BLOCK_N=block_n, HAS_BIAS=bias is not None, RMS=rms, DROPOUT=p > 0,
        num_warps=num_warps)
    return y, h, mean, rstd


@functools.cache
def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def bwd_layout(m: int, n: int, device, programs=None, config=None) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, rows per program, programs) of the backward launch. Each program loops
    over its rows and writes one row of partial dweight/dbias; by default _BWD's programs per SM."""
    block_m, block_n, num_warps = _config(n, backward=True)
    block_m, num_warps = config or (block_m, num_warps)
    if programs is None:
        programs = _BWD.get(block_n, (0, 0, 8))[2] * sm_count(torch.device(device))
    rows_per_program = triton.cdiv(triton.cdiv(m, min(programs, triton.cdiv(m, block_m))), block_m) * block_m
    return block_m, block_n, num_warps, rows_per_program, triton.cdiv(m, rows_per_program)


def add_layernorm_bwd(dy, dh_out, h, weight, bias, mean, rstd, p=0.0, seed=0, rms=False, x_dtype=None,
                      programs=None, config=None):
    """(dx, dresidual, dweight, dbias) from dy (and dh_out, the gradient reaching h directly, or None).
    programs and config ((BLOCK_M, num_warps)) override bwd_layout's choice."""
    m, n = h.shape
    dy2 = _as_rows(dy)
    dho2 = None if dh_out is None else _as_rows(dh_out)
    block_m, block_n, num_warps, rows_per_program, programs = bwd_layout(m, n, h.device, programs, config)
    dx = empty((m, n), x_dtype or h.dtype, h.device)
    dr = empty((m, n), h.dtype, h.device)
    dw_part = empty((programs, n), torch.float32, h.device)
    db_part = None if bias is None else empty((programs, n), torch.float32, h.device)
    _bwd_kernel[(programs,)](
        dy2, h, dy2 if dho2 is None else dho2, weight, rstd if rms else mean, rstd, dx, dr,
        dw_part, dw_part if db_part is None else db_part,
        dy2.stride(0), h.stride(0), 0 if dho2 is None else dho2.stride(0), dx.stride(0), dr.stride(0),
        m, n, p, 1.0 / (1.0 - p), seed, rows_per_program,
        BLOCK_M=block_m, BLOCK_N=block_n, HAS_BIAS=bias is not None, RMS=rms, DROPOUT=p > 0,
        HAS_DHO=dho2 is not None, num_warps=num_warps)
    dw = dw_part.sum(0).to(weight.dtype)
    db = None if bias is None else db_part.sum(0).to(bias.dtype)
    return dx, dr, dw, db


class AddLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, bias, eps, p, seed, rms):
        y, h, mean, rstd = add_layernorm_fwd(x, residual, weight, bias, eps, p, seed, rms)
        ctx.save_for_backward(h, weight, bias, mean, rstd)
        ctx.cfg = (p, seed, rms, x.dtype, x.shape, residual.shape)
        ctx.set_materialize_grads(False)
        return y.view(x.shape), h.view(residual.shape)

    @staticmethod
    def backward(ctx, dy, dh_out):
        h, weight, bias, mean, rstd = ctx.saved_tensors
        p, seed, rms, x_dtype, x_shape, r_shape = ctx.cfg
        if dy is None:
            dy = torch.zeros(h.shape, dtype=x_dtype, device=h.device)
        dx, dr, dw, db = add_layernorm_bwd(dy, dh_out, h, weight, bias, mean, rstd, p, seed, rms, x_dtype)
        return dx.view(x_shape), dr.view(r_shape), dw, db, None, None, None, None


def add_layernorm(x, residual, weight, bias=None, eps=1e-5, p=0.0, seed=None, rms=False, training=True):
    """(y, h): y = norm(dropout(x) + residual) * weight + bias, h = dropout(x) + residual."""
    p = p if training else 0.0
    if seed is None:
        seed = int(torch.randint(2**31 - 1, ())) if p > 0 else 0
    return AddLayerNorm.apply(x, residual, weight, bias, eps, p, seed, rms)


def add_rmsnorm(x, residual, weight, bias=None, eps=1e-6, p=0.0, seed=None, training=True):
    return add_layernorm(x, residual, weight, bias, eps, p, seed, rms=True, training=training)


def add_layernorm_ref(x, residual, weight, bias=None, eps=1e-5, p=0.0, keep=None, rms=False,
                      dtype=torch.float32, h_dtype=None):
    """Unfused (y, h) computed in `dtype`, applying the mask `keep` from `dropout_mask`. The norm reads h
    rounded to `h_dtype` (default: residual's dtype), as stored; gradients pass straight through."""
    h_dtype = h_dtype or residual.dtype
    x, residual, weight = x.to(dtype), residual.to(dtype), weight.to(dtype)
    if p > 0:
        x = torch.where(keep, x * (1.0 / (1.0 - p)), 0.0)
    h = x + residual
    h = h + (h.to(h_dtype).to(dtype) - h).detach()
    n = (h.shape[-1],)
    y = F.rms_norm(h, n, weight, eps) if rms else F.layer_norm(h, n, weight, None, eps)
    return (y if bias is None else y + bias.to(dtype)), h


def add_layernorm_eager(x, residual, weight, bias=None, eps=1e-5, p=0.0, rms=False, training=True):
    """The unfused baseline as PyTorch code runs it, in the input dtype: F.dropout draws its own mask
    (a different stream from the fused kernel's) and stores it, then an add, then the norm."""
    h = (F.dropout(x, p, training) if p > 0 and training else x) + residual
    n = (h.shape[-1],)
    if rms:
        y = F.rms_norm(h, n, weight, eps)
        return (y if bias is None else y + bias), h
    return F.layer_norm(h, n, weight, bias, eps), h
