"""Weight-only quantisation for decode: W8A16 (int8, one scale per output channel and group) and W4A16 (int4
packed two to a byte, one scale per output channel and group of 128 along K), and two Triton kernels that
dequantise in registers: a GEMM that feeds the tensor cores, and a GEMV for a few rows (decode) on CUDA cores,
with its weights transposed once at load time and a one-kernel split-K. They save memory traffic (weights are
read in 8 or 4 bits), not arithmetic: the multiply still runs in 16 or 32 bits.

Weights are [N, K] like nn.Linear's; y = x @ W.T with x [M, K]."""
from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl

# Triton 3.6's interpreter gets tl.dot wrong for bf16 operands (see fusion/gemm.py)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


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


# --8<-- [start:gemv]
@triton.jit
def _unpack(words, j, BITS: tl.constexpr, ONE):
    """Fields j of int32 words (j a tensor of field indices, broadcast against words) as the floats
    f = 1 + u / 2**BITS, u the field's unsigned value (int4: the stored value + 8; int8: the two's-complement byte
    + 128), by moving u into the mantissa under the exponent of 1.0: shifts and one logic op per weight, no
    int-to-float conversion (those run at a quarter of the FMA rate). j is a constant in each register (the fields
    of a word stay in one thread), so the two shifts fold into one. ONE holds 1.0's bits (with the sign flip for
    int8) as a run-time value: in a register, it lets the mask and the exponent go into one LOP3 (an instruction
    takes one immediate)."""
    field: tl.constexpr = ((1 << BITS) - 1) << (23 - BITS)
    bits = ((words >> (j * BITS)) << (23 - BITS)) & field  # arithmetic >> is fine: the mask drops the sign copies
    if BITS == 8:  # flip the sign bit: two's complement q + 128
        bits = bits ^ ONE
    else:
        bits = bits | ONE
    return bits.to(tl.float32, bitcast=True)
# --8<-- [end:gemv]


# f16x2 arithmetic (fp16 activations): one LOP3 (int4) or byte permute (int8) puts a field pair of a word under
# fp16's exponent of 1024, one SUB.F16x2 or FMA.F16x2 leaves the two stored values, and one HFMA2 multiplies two
# weights by two x at once
_DEQ4 = tl.constexpr("""{
.reg .b32 t1, sixteenth, offset;
mov.b32 sixteenth, 0x2C002C00;
mov.b32 offset, 0xD480D480;
shr.u32 t1, $4, 8;
lop3.b32 $0, $4, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 $1, $4, 0x00F000F0, 0x64006400, 0xEA;
lop3.b32 $2, t1, 0x000F000F, 0x64006400, 0xEA;
lop3.b32 $3, t1, 0x00F000F0, 0x64006400, 0xEA;
sub.f16x2 $0, $0, $5;
fma.rn.f16x2 $1, $1, sixteenth, offset;
sub.f16x2 $2, $2, $5;
fma.rn.f16x2 $3, $3, sixteenth, offset;
}""")  # low nibbles: (w & 0xF) | 0x6400 = 1024 + u, minus 1032 leaves u - 8; high nibbles, in place (as Marlin
# does): 1024 + 16u, times 1/16 minus 72 leaves u - 8; all exact in fp16. One shift per word instead of three
_DEQ8 = tl.constexpr("""{
.reg .b32 exp;
mov.b32 exp, 0x64646464;
prmt.b32 $0, $2, exp, 0x4140;
prmt.b32 $1, $2, exp, 0x4342;
sub.f16x2 $0, $0, $3;
sub.f16x2 $1, $1, $3;
}""")  # one byte permute puts bytes 2j and 2j + 1 (stored as q + 128) under fp16's exponent 0x64: 1024 + q + 128 in
# each half; minus 1152 leaves q
_MUL = tl.constexpr("mul.rn.f16x2 $0, $1, $2;")
_FMA = tl.constexpr("fma.rn.f16x2 $0, $1, $2, $3;")
_UNPACK = tl.constexpr("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $2; cvt.f32.f16 $0, lo; cvt.f32.f16 $1, hi; }")
PAIRED_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble f of a paired int4 word holds k = 8w + PAIRED_ORDER[f]


@triton.jit
def _hfma(d, x, h):
    return tl.inline_asm_elementwise(_FMA, "=r,r,r,r", [d, x, h], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def _paired_step(words, xp, m_ok, magic, BITS: tl.constexpr):
    """sum over a word's fields of value * x, in fp32 [MP, R, BLOCK_N]: the fields dequantised two at a time in
    f16x2 and multiplied by x pairs (int32 words of fp16 x, [MP, R, 1] each) with HFMA2, then widened once."""
    x0 = tl.load(xp, mask=m_ok)
    x1 = tl.load(xp + 1, mask=m_ok)
    if BITS == 4:
        d0, d1, d2, d3 = tl.inline_asm_elementwise(_DEQ4, "=r,=r,=r,=r,r,r", [words, magic],
                                                   dtype=(tl.int32, tl.int32, tl.int32, tl.int32), is_pure=True,
                                                   pack=1)
        h = tl.inline_asm_elementwise(_MUL, "=r,r,r", [d0, x0], dtype=tl.int32, is_pure=True, pack=1)
        h = _hfma(d1, x1, h)
        h = _hfma(d2, tl.load(xp + 2, mask=m_ok), h)
        h = _hfma(d3, tl.load(xp + 3, mask=m_ok), h)
    else:
        d0, d1 = tl.inline_asm_elementwise(_DEQ8, "=r,=r,r,r", [words, magic], dtype=(tl.int32, tl.int32),
                                           is_pure=True, pack=1)
        h = tl.inline_asm_elementwise(_MUL, "=r,r,r", [d0, x0], dtype=tl.int32, is_pure=True, pack=1)
        h = _hfma(d1, x1, h)
    lo, hi = tl.inline_asm_elementwise(_UNPACK, "=f,=f,r", [h], dtype=(tl.float32, tl.float32), is_pure=True,
                                       pack=1)
    return lo + hi


@triton.jit
def _wq_gemv_kernel(X, Wt, St, Y, Y32, CNT, M, N, stride_xm, stride_wk, stride_sk, k_per_prog, ONE,
                    GROUP: tl.constexpr, BITS: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, R: tl.constexpr,
                    PREFETCH: tl.constexpr, SPLIT: tl.constexpr, PAIRED: tl.constexpr):
    """A few rows of x (decode) on CUDA cores, over the words transposed (pack_gemv): a warp's loads run along N.
    Program (i, j) takes BLOCK_N columns and the j-th slice of K, in steps of R word rows (one scale group at most).
    fp32 path: a step loads x once as a contiguous [MP, PER, R] tile and expands all fields of the words to [MP,
    PER, R, BLOCK_N], so the sum over a word's fields stays in one thread. With f = 1 + u / 2**B and the stored
    value w = u - 2**(B-1): sum(w x) = 2**B sum(f x) - 3 * 2**(B-1) sum(x): _unpack, an FMA, one correction per
    step. PAIRED (fp16 x, given as int32 pairs; words packed by pack_gemv(paired=True); ONE holds the f16x2 magic
    number): _paired_step, two weights per instruction."""
    PER: tl.constexpr = 32 // BITS  # weights per word
    STEP: tl.constexpr = R * PER
    j4 = tl.arange(0, PER)[None, :, None, None]
    m3 = tl.arange(0, MP)[:, None, None]
    r3 = tl.arange(0, R)[None, :, None]
    if PAIRED:  # x pairs of word row r: int32 (r * PER + 2f, + 1) / 2
        xk = r3 * (PER // 2)
    else:
        xk = tl.arange(0, PER)[None, :, None] + PER * tl.arange(0, R)[None, None, :]  # [1, PER, R]: k of each field
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    if PAIRED:
        wofs = r3 * stride_wk + rn[None, None, :]  # [1, R, BLOCK_N]
    else:
        wofs = tl.arange(0, R)[None, None, :, None] * stride_wk + rn[None, None, None, :]  # [1, 1, R, BLOCK_N]
    sofs = rn[None, None, :] + 0 * r3  # the scale row, in acc's shape and layout
    xrow, m_ok = X + m3 * stride_xm, m3 < M
    magic = tl.full([1, R, BLOCK_N], ONE, tl.int32)
    acc = tl.zeros([MP, R, BLOCK_N], tl.float32)
    k_start = tl.program_id(1) * k_per_prog
    k_last = k_start + k_per_prog - STEP
    if PREFETCH:  # Triton does not pipeline these loads: issue the next step's before this step's arithmetic
        words, s, x = _gemv_loads(Wt, St, xrow, k_start, wofs, sofs, xk, n_ok, m_ok, stride_wk, stride_sk, PER,
                                  GROUP, PAIRED)
    for k0 in range(k_start, k_start + k_per_prog, STEP):
        if PREFETCH:  # the last step reloads itself rather than reading past the slice
            cur, cur_s, cur_x = words, s, x
            words, s, x = _gemv_loads(Wt, St, xrow, tl.minimum(k0 + STEP, k_last), wofs, sofs, xk, n_ok, m_ok,
                                      stride_wk, stride_sk, PER, GROUP, PAIRED)
        else:
            cur, cur_s, cur_x = _gemv_loads(Wt, St, xrow, k0, wofs, sofs, xk, n_ok, m_ok, stride_wk, stride_sk,
                                            PER, GROUP, PAIRED)
        if PAIRED:
            acc += cur_s * _paired_step(cur, cur_x, m_ok, magic, BITS)
        else:
            x4 = cur_x[:, :, :, None].to(tl.float32)  # 4-D after the load: the product takes the words' layout
            fx = tl.sum(_unpack(cur, j4, BITS, ONE) * x4, 1)  # [MP, R, BLOCK_N]
            acc += cur_s * ((1 << BITS) * fx - 3 * (1 << (BITS - 1)) * tl.sum(x4, 1))
    part = tl.sum(acc, 1)  # [MP, BLOCK_N]
    rows = tl.arange(0, MP)
    offs = rows[:, None] * N + rn[None, :]
    mask = (rows < M)[:, None] & n_ok[None, :]
    if not SPLIT:
        tl.store(Y + offs, part.to(Y.dtype.element_ty), mask=mask)
    else:  # split-K in one kernel: add into fp32 sums; the column block's last program writes y and re-zeroes
        tl.atomic_add(Y32 + offs, part, mask=mask, sem="relaxed")
        tl.debug_barrier()  # every thread's adds come before the counter's release
        done = tl.atomic_add(CNT + tl.program_id(0), 1, sem="acq_rel")
        if done == tl.num_programs(1) - 1:
            total = tl.load(Y32 + offs, mask=mask, other=0.0, cache_modifier=".cg")  # from L2, past this SM's L1
            tl.store(Y + offs, total.to(Y.dtype.element_ty), mask=mask)
            tl.store(Y32 + offs, tl.zeros_like(total), mask=mask)
            tl.store(CNT + tl.program_id(0), 0)


@triton.jit
def _gemv_loads(Wt, St, xrow, k, wofs, sofs, xk, n_ok, m_ok, stride_wk, stride_sk, PER: tl.constexpr,
                GROUP: tl.constexpr, PAIRED: tl.constexpr):
    """One step's words, scales and x (PAIRED: x's address, its pairs being loaded in _paired_step)."""
    words = tl.load(Wt + (k // PER) * stride_wk + wofs, mask=n_ok)  # no `other`: masked lanes are never stored
    s = tl.load(St + (k // GROUP) * stride_sk + sofs, mask=n_ok)
    if PAIRED:
        x = xrow + k // 2 + xk
    else:
        x = tl.load(xrow + k + xk, mask=m_ok, other=0.0)
    return words, s, x


@triton.jit
def _xor(a, b):
    return a ^ b


@triton.jit
def _read_words_kernel(Wt, Y, N, stride_wk, words_per_prog, BLOCK_N: tl.constexpr, R: tl.constexpr):
    """The bound: the GEMV's grid and weight loads with no arithmetic, XOR-reduced so no load can be dropped."""
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ofs = tl.arange(0, R)[:, None] * stride_wk + rn[None, :]
    acc = tl.zeros([R, BLOCK_N], tl.int32)
    w_start = tl.program_id(1) * words_per_prog
    for w0 in range(w_start, w_start + words_per_prog, R):
        acc ^= tl.load(Wt + w0 * stride_wk + ofs, mask=(rn < N)[None, :], other=0)
    tl.atomic_xor(Y + rn, tl.reduce(acc, 0, _xor), mask=rn < N, sem="relaxed")


GEMV_MAX_ROWS = 4  # up to this many rows of x, the CUDA-core kernel; more, the tensor-core one


def wq_matmul(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, bits: int, group: int = 128,
              block_n: int = 64, block_k: int = 128, num_warps: int = 4, num_stages: int = 3,
              split_k: int = 1) -> torch.Tensor:
    """y = x @ dequantize(q, scales).T on tensor cores, x [M, K] in bf16 or fp16; y in x's dtype. block_k is the K
    step of one iteration (at most one scale group). split_k > 1 divides K among that many programs per output
    tile (fp32 partials, then one sum): at small batch an 8192-wide layer has only N / block_n tiles."""
    m, k = x.shape
    n = q.shape[0]
    block_k = min(block_k, group)
    if group % block_k or k % block_k or (q.shape[1] * (2 if bits == 4 else 1)) != k:
        raise ValueError(f"K ({k}), BLOCK_K ({block_k}) and the group ({group}) do not tile: one must divide the "
                         f"other, and q must hold K")
    if split_k < 1 or k % (split_k * block_k):
        raise ValueError(f"K ({k}) must split into {split_k} slices of whole BLOCK_K ({block_k}) steps")
    x = x.contiguous()
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    grid = (triton.cdiv(n, block_n), triton.cdiv(m, block_m), split_k)
    y = torch.empty((split_k, m, n), dtype=x.dtype if split_k == 1 else torch.float32, device=x.device)
    _wq_gemm_kernel[grid](x, q, scales, y, m, n, k, x.stride(0), q.stride(0), scales.stride(0), y.stride(1),
                          y.stride(0), k // split_k, GROUP=group, BITS=bits, BLOCK_M=block_m, BLOCK_N=block_n,
                          BLOCK_K=block_k, DOT_FP32=INTERPRETED, num_warps=num_warps, num_stages=num_stages)
    return y[0] if split_k == 1 else y.sum(0).to(x.dtype)


class GemvWeights(NamedTuple):
    wt: torch.Tensor  # int32 [K // per-word, N]: word row r holds k = per-word * r + j in field j
    #                   (paired int4: k = 8r + PAIRED_ORDER[j])
    st: torch.Tensor  # fp32 [K // group, N]
    bits: int
    group: int
    y32: torch.Tensor  # split-K workspace: fp32 [GEMV_MAX_ROWS, N] and int32 [N // 16] counters, kept zero
    cnt: torch.Tensor
    paired: bool = False  # int4 fields in PAIRED_ORDER, int8 ones as q + 128: for the f16x2 path (fp16 x)


def pack_gemv(q: torch.Tensor, scales: torch.Tensor, bits: int, group: int = 128, paired: bool = False) -> GemvWeights:
    """Once per layer, when the weights are loaded: quantize's output transposed for the CUDA-core kernel (paired:
    int4 fields reordered so that one LOP3 pulls out two neighbouring k; int8 bytes stored as q + 128 so that one
    byte permute does), and its split-K workspace (so a layer must not run on two streams at once)."""
    n, dev = q.shape[0], q.device
    if paired:
        if bits == 4:
            u = torch.stack([q & 0xF, q >> 4], -1).view(n, -1, 8)[..., PAIRED_ORDER].reshape(n, -1, 2)
            q = (u[..., 0] | (u[..., 1] << 4)).contiguous()
        else:  # the sign bit flipped
            q = (q.view(torch.uint8) ^ 0x80).contiguous()
    return GemvWeights(q.view(torch.int32).T.contiguous(), scales.T.contiguous(), bits, group,
                       torch.zeros((GEMV_MAX_ROWS, n), dtype=torch.float32, device=dev),
                       torch.zeros(triton.cdiv(n, 16), dtype=torch.int32, device=dev), paired)


def _gemv_grid(p: GemvWeights, k: int, block_n: int, step: int, k_per_prog: int) -> tuple[int, int]:
    per = 32 // p.bits
    if step % per or p.group % step or k_per_prog % step or k % k_per_prog or p.wt.shape[0] * per != k:
        raise ValueError(f"step ({step}) must be whole words and divide the group ({p.group}) and the K slice "
                         f"({k_per_prog}), which must divide K ({k})")
    if block_n < 16:
        raise ValueError(f"BLOCK_N must be at least 16 (the workspace's counters), not {block_n}")
    return triton.cdiv(p.wt.shape[1], block_n), k // k_per_prog


def wq_gemv(x: torch.Tensor, p: GemvWeights, block_n: int = 64, step: int = 64, k_per_prog: int = 512,
            num_warps: int = 2, prefetch: bool = False) -> torch.Tensor:
    """y = x @ W.T for up to GEMV_MAX_ROWS rows of x, from pack_gemv's weights; step: weights of K per iteration;
    k_per_prog < K splits K among programs (at batch 1 an 8192-wide layer has only N / block_n column blocks)."""
    m, k = x.shape
    if m > GEMV_MAX_ROWS:
        raise ValueError(f"the CUDA-core kernel takes up to {GEMV_MAX_ROWS} rows of x, not {m}")
    grid = _gemv_grid(p, k, block_n, step, k_per_prog)
    x = x.contiguous()
    y = torch.empty((m, p.wt.shape[1]), dtype=x.dtype, device=x.device)
    if p.paired:
        if x.dtype != torch.float16 or INTERPRETED:
            raise ValueError(f"the paired (f16x2) GEMV takes fp16 x on a GPU (inline PTX), not {x.dtype}"
                             + (" in the interpreter" if INTERPRETED else ""))
        xs, stride, one = x.view(torch.int32), x.stride(0) // 2, 0x64086408 if p.bits == 4 else 0x64806480
    else:  # 1.0, and the int8 sign flip at bit 22
        xs, stride, one = x, x.stride(0), 0x3F800000 | (0x400000 if p.bits == 8 else 0)
    _wq_gemv_kernel[grid](xs, p.wt, p.st, y, p.y32, p.cnt, m, y.shape[1], stride, p.wt.stride(0),
                          p.st.stride(0), k_per_prog, one, GROUP=p.group, BITS=p.bits,
                          MP=triton.next_power_of_2(m), BLOCK_N=block_n, R=step // (32 // p.bits),
                          PREFETCH=prefetch, SPLIT=grid[1] > 1, PAIRED=p.paired, num_warps=num_warps,
                          num_stages=1)
    return y


def read_words(p: GemvWeights, k: int, block_n: int = 64, step: int = 64, k_per_prog: int = 512,
               num_warps: int = 2) -> torch.Tensor:
    """The GEMV's weight reads alone, at its grid: the XOR over K of each column's words (int32 [N])."""
    grid = _gemv_grid(p, k, block_n, step, k_per_prog)
    y = torch.zeros(p.wt.shape[1], dtype=torch.int32, device=p.wt.device)
    per = 32 // p.bits
    _read_words_kernel[grid](p.wt, y, y.shape[0], p.wt.stride(0), k_per_prog // per, BLOCK_N=block_n,
                             R=step // per, num_warps=num_warps, num_stages=1)
    return y
