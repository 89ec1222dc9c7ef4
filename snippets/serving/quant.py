"""Weight-only quantisation for decode: W8A16 (int8, one scale per output channel and group) and W4A16 (int4
packed two to a byte, one scale per output channel and group of 128 along K), and a Triton GEMM that
dequantises the weight tile in registers before the tensor-core dot. It saves memory traffic (weights are
read in 8 or 4 bits), not arithmetic: the multiply still runs in bf16/fp16.

Weights are [N, K] like nn.Linear's; y = x @ W.T with x [M, K]."""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# Triton 3.6's interpreter gets tl.dot wrong for bf16 operands (see fusion/gemm.py)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


# --8<-- [start:quantize]
def quantize(w: torch.Tensor, bits: int, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-(row, group) quantisation. Returns (q, scales): int8 [N, K] for 8 bits, or uint8 [N, K // 2]
    holding k = 2j in the low nibble and k = 2j + 1 in the high one (value + 8) for 4 bits; scales fp32
    [N, K // group]."""
    if bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8, got {bits}")
    n, k = w.shape
    if k % group or group % 2:
        raise ValueError(f"K ({k}) must be a multiple of the group size ({group}), which must be even")
    levels = 127 if bits == 8 else 7
    g = w.float().view(n, k // group, group)
    scales = (g.abs().amax(-1) / levels).clamp(min=1e-12)
    q = torch.round(g / scales[..., None]).clamp(-levels - (bits == 4), levels).view(n, k)
    if bits == 8:
        return q.to(torch.int8), scales
    u = (q + 8).to(torch.uint8)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).contiguous(), scales


def dequantize(q: torch.Tensor, scales: torch.Tensor, bits: int, group: int = 128) -> torch.Tensor:
    """fp32 [N, K] back from quantize's output: the reference the kernel is checked against."""
    if bits == 4:
        lo, hi = (q & 0xF).to(torch.int16) - 8, (q >> 4).to(torch.int16) - 8
        q = torch.stack([lo, hi], -1).view(q.shape[0], -1)
    n, k = q.shape
    return (q.float().view(n, k // group, group) * scales[..., None]).view(n, k)
# --8<-- [end:quantize]


# --8<-- [start:kernel]
@triton.jit
def _wq_gemm_kernel(X, Wq, S, Y, M, N, K, stride_xm, stride_wn, stride_sn, stride_ym, stride_ys, k_per_split,
                    GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, DOT_FP32: tl.constexpr):
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    split = tl.program_id(2)  # split-K: each split sums its own slice of K into its own fp32 partial
    n_ok, m_ok = rn < N, rm < M
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    k_start = split * k_per_split
    for k0 in range(k_start, k_start + k_per_split, BLOCK_K):  # the launcher makes BLOCK_K divide GROUP and K
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(X + rm[:, None] * stride_xm + rk[None, :], mask=m_ok[:, None], other=0.0)
        if BITS == 8:
            w = tl.load(Wq + rn[:, None] * stride_wn + rk[None, :], mask=n_ok[:, None], other=0).to(tl.float32)
        else:  # two weights per byte: low nibble k = 2j, high nibble k = 2j + 1, stored as value + 8
            rj = k0 // 2 + tl.arange(0, BLOCK_K // 2)
            packed = tl.load(Wq + rn[:, None] * stride_wn + rj[None, :], mask=n_ok[:, None], other=0)
            lo = (packed & 0xF).to(tl.float32) - 8.0
            hi = (packed >> 4).to(tl.float32) - 8.0
            w = tl.reshape(tl.join(lo, hi), [BLOCK_N, BLOCK_K])  # join puts the pair innermost: 2j, 2j + 1
        s = tl.load(S + rn * stride_sn + k0 // GROUP, mask=n_ok, other=0.0)
        w = (w * s[:, None]).to(X.dtype.element_ty)  # dequantised in registers, never written back
        if DOT_FP32:
            acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc)
        else:
            acc = tl.dot(x, tl.trans(w), acc)
    y_ptrs = Y + split * stride_ys + rm[:, None] * stride_ym + rn[None, :]
    tl.store(y_ptrs, acc.to(Y.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])
# --8<-- [end:kernel]


# --8<-- [start:gemv]
@triton.jit
def _unpack(words, j: tl.constexpr, BITS: tl.constexpr, ONE):
    """Field j of each int32 word as the float f = 1 + u / 2**BITS, u its unsigned value (int4: the stored
    value + 8; int8: the two's-complement byte + 128), by moving u into the mantissa under the exponent of 1.0:
    a shift and one logic op per weight, no int-to-float conversion (those run at a quarter of the FMA rate).
    ONE holds 1.0's bits (with the sign flip for int8) as a run-time value: in a register, it lets the mask and
    the exponent go into one LOP3 (an instruction takes one immediate)."""
    shift: tl.constexpr = 23 - BITS - BITS * j  # bring field j to bits [23 - BITS, 23)
    field: tl.constexpr = ((1 << BITS) - 1) << (23 - BITS)
    moved = (words << shift) if shift >= 0 else (words >> -shift)
    if BITS == 8:  # flip the sign bit: two's complement q + 128
        bits = (moved & field) ^ ONE
    else:
        bits = (moved & field) | ONE
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _wq_gemv_kernel(X, Wq, S, Y, M, N, K, stride_xm, stride_wn, stride_sn, stride_ym, stride_ys, k_per_split, ONE,
                    GROUP: tl.constexpr, BITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    G_PER: tl.constexpr, GK: tl.constexpr):
    """Few rows of x (decode), on CUDA cores. The weights are read as int32 words (32 / BITS weights each) in
    tiles [BLOCK_N, G_PER, GK / per-word] (each of the G_PER chunks inside one scale group). With f = 1 + u / 2**B
    and the stored value w = u - 2**(B-1): sum(w x) = 2**B sum(f x) - 3 * 2**(B-1) sum(x), so the dequantisation
    is _unpack, an FMA, and one correction per group."""
    PER: tl.constexpr = 32 // BITS  # weights per word
    KW: tl.constexpr = GK // PER  # words per chunk row
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m0 = tl.program_id(1) * BLOCK_M
    split = tl.program_id(2)
    n_ok = rn < N
    g = tl.arange(0, G_PER)
    rows = tl.arange(0, BLOCK_M)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    k_start = split * k_per_split
    for k0 in range(k_start, k_start + k_per_split, G_PER * GK):
        kw = (k0 // PER + g * KW)[:, None] + tl.arange(0, KW)[None, :]  # word index [G_PER, KW]
        words = tl.load(Wq + rn[:, None, None] * stride_wn + kw[None, :, :], mask=n_ok[:, None, None], other=0)
        s = tl.load(S + rn[:, None] * stride_sn + ((k0 + g * GK) // GROUP)[None, :], mask=n_ok[:, None], other=0.0)
        for i in tl.static_range(BLOCK_M):
            m_ok = m0 + i < M
            xrow = X + (m0 + i) * stride_xm
            fx = tl.zeros([BLOCK_N, G_PER, KW], tl.float32)
            sx = tl.zeros([G_PER, KW], tl.float32)
            for j in tl.static_range(PER):  # field j of word w is column PER * w + j
                x = tl.load(xrow + PER * kw + j, mask=m_ok, other=0.0).to(tl.float32)
                fx += _unpack(words, j, BITS, ONE) * x[None, :, :]
                sx += x
            part = (1 << BITS) * tl.sum(fx, 2) - 3 * (1 << (BITS - 1)) * tl.sum(sx, 1)[None, :]
            acc += tl.where(rows[:, None] == i, tl.sum(part * s, 1)[None, :], 0.0)
    rm = m0 + rows
    y_ptrs = Y + split * stride_ys + rm[:, None] * stride_ym + rn[None, :]
    tl.store(y_ptrs, acc.to(Y.dtype.element_ty), mask=(rm < M)[:, None] & n_ok[None, :])
# --8<-- [end:gemv]


# --8<-- [start:launch]
GEMV_MAX_ROWS = 4  # up to this many rows of x, the CUDA-core kernel by default; more, the tensor-core one


def wq_matmul(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, bits: int, group: int = 128,
              block_n: int = 64, block_k: int = 128, num_warps: int = 4, num_stages: int = 3,
              split_k: int = 1, gemv: bool | None = None) -> torch.Tensor:
    """y = x @ dequantize(q, scales).T with x [M, K] in bf16 or fp16; y in x's dtype. block_k is the K step of
    one iteration. split_k > 1 divides K among that many programs per output tile (fp32 partials, then one sum):
    at batch 1 an 8192-wide layer has only N / block_n tiles, too few to keep every SM reading weights.
    gemv: the CUDA-core kernel (True, up to GEMV_MAX_ROWS rows) or the tensor-core one (False); None picks by M."""
    m, k = x.shape
    n = q.shape[0]
    if gemv is None:
        gemv = m <= GEMV_MAX_ROWS
    elif gemv and m > GEMV_MAX_ROWS:
        raise ValueError(f"the CUDA-core kernel takes up to {GEMV_MAX_ROWS} rows of x, not {m}")
    if not gemv:
        block_k = min(block_k, group)
    gk = min(block_k, group)
    if block_k % gk or group % gk or k % block_k or (q.shape[1] * (2 if bits == 4 else 1)) != k:
        raise ValueError(f"K ({k}), BLOCK_K ({block_k}) and the group ({group}) do not tile: one must divide the "
                         f"other, and q must hold K")
    if split_k < 1 or k % (split_k * block_k):
        raise ValueError(f"K ({k}) must split into {split_k} slices of whole BLOCK_K ({block_k}) steps")
    x = x.contiguous()
    block_m = triton.next_power_of_2(m) if gemv else 16 if m <= 16 else 32 if m <= 32 else 64
    grid = (triton.cdiv(n, block_n), triton.cdiv(m, block_m), split_k)
    y = torch.empty((split_k, m, n), dtype=x.dtype if split_k == 1 else torch.float32, device=x.device)
    w = q.view(torch.int32) if gemv else q  # the CUDA-core kernel reads whole 32-bit words
    args = (x, w, scales, y, m, n, k, x.stride(0), w.stride(0), scales.stride(0), y.stride(1), y.stride(0),
            k // split_k)
    if gemv:
        one = 0x3F800000 | (0x400000 if bits == 8 else 0)  # 1.0, and the int8 sign flip at bit 22
        _wq_gemv_kernel[grid](*args, one, GROUP=group, BITS=bits, BLOCK_M=block_m, BLOCK_N=block_n,
                              G_PER=block_k // gk, GK=gk, num_warps=num_warps, num_stages=num_stages)
    else:
        _wq_gemm_kernel[grid](*args, GROUP=group, BITS=bits, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                              DOT_FP32=INTERPRETED, num_warps=num_warps, num_stages=num_stages)
    return y[0] if split_k == 1 else y.sum(0).to(x.dtype)
# --8<-- [end:launch]
