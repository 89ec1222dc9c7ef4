"""Decode attention over a paged KV cache, in Triton: one query token per sequence, grouped-query heads (G query
heads share a KV head), any block size, variable lengths in one batch; and split-KV (flash-decoding), which
splits each sequence's context across programs and merges them by log-sum-exp, chosen when batch x KV heads
is too few programs to fill the GPU."""
from __future__ import annotations

import functools
import math
import os

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

# Triton 3.6's interpreter gets tl.dot wrong for bf16 operands (see fusion/gemm.py): there the kernel
# multiplies in fp32. Compiled kernels never take that branch.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _decode_kernel(Q, K, V, BT, Lens, O, Lse, stride_qb, stride_qh, stride_kb, stride_kp, stride_kh, stride_bt,
                   stride_ob, stride_oh, stride_os, scale, pages_per_split,
                   G: tl.constexpr, G_PAD: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                   TILE_PAGES: tl.constexpr, SPLIT: tl.constexpr, DOT_FP32: tl.constexpr, PRECISION: tl.constexpr):
    b, kvh, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    length = tl.load(Lens + b)
    first = s * pages_per_split
    last = tl.minimum(first + pages_per_split, tl.cdiv(length, PAGE))
    g, d = tl.arange(0, G_PAD), tl.arange(0, D)
    heads = kvh * G + g
    q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=(g < G)[:, None], other=0.0)
    if DOT_FP32:
        q = q.to(tl.float32)
    t = tl.arange(0, TILE_PAGES * PAGE)
    m_i = tl.full([G_PAD], -1e30, tl.float32)  # finite: a tile with nothing valid leaves exp(m_i - m_new) = 1
    l_i = tl.zeros([G_PAD], tl.float32)
    acc = tl.zeros([G_PAD, D], tl.float32)
    for p0 in range(first, last, TILE_PAGES):
        page = p0 + t // PAGE
        ok = (page < last) & (page * PAGE + t % PAGE < length)
        phys = tl.load(BT + b * stride_bt + page, mask=page < last, other=0).to(tl.int64)  # the block table
        off = phys[:, None] * stride_kb + (t % PAGE)[:, None] * stride_kp + kvh * stride_kh + d[None, :]
        k = tl.load(K + off, mask=ok[:, None], other=0.0)
        v = tl.load(V + off, mask=ok[:, None], other=0.0)
        if DOT_FP32:
            k, v = k.to(tl.float32), v.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        scores = tl.where(ok[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, 1))
        p = tl.exp(scores - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    out = acc / tl.maximum(l_i, 1e-30)[:, None]
    o_ptrs = O + b * stride_ob + heads[:, None] * stride_oh + s * stride_os + d[None, :]
    if SPLIT:  # fp32 partial result and its log-sum-exp; an empty split has lse = -inf and weighs nothing
        tl.store(o_ptrs, out, mask=(g < G)[:, None])
        lse = tl.where(l_i > 0, m_i + tl.log(l_i), float("-inf"))
        tl.store(Lse + (b * tl.num_programs(1) * G + heads) * tl.num_programs(2) + s, lse, mask=g < G)
    else:
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(g < G)[:, None])


@triton.jit
def _combine_kernel(Op, Lse, Out, S, S_PAD: tl.constexpr, D: tl.constexpr):
    """Out[b, h] = sum_s w_s Op[b, h, s], w_s = exp(lse_s - max lse) normalised: one program per (b, h)."""
    bh = tl.program_id(0)
    s, d = tl.arange(0, S_PAD), tl.arange(0, D)
    lse = tl.load(Lse + bh * S + s, mask=s < S, other=float("-inf"))
    w = tl.exp(lse - tl.max(lse, 0))
    o = tl.load(Op + (bh * S + s)[:, None] * D + d[None, :], mask=(s < S)[:, None], other=0.0)
    tl.store(Out + bh * D + d, (tl.sum(w[:, None] * o, 0) / tl.sum(w, 0)).to(Out.dtype.element_ty))




@functools.cache
def _sms(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if torch.device(device).type == "cuda" else 4


@functools.cache
def default_tile(device) -> tuple[int, int]:
    """(tokens per tile, pipeline stages): K and V tiles of 128 x 128 bf16, double-buffered, take 128 KiB of
    shared memory, which an A100 or H100/H200 has; an L4 or other sm_86/89 part gets 64-token tiles, and a
    T4 (sm_75, 64 KiB) single-buffered ones."""
    if torch.device(device).type != "cuda":
        return 128, 2
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 0):
        return 64, 1
    return (128, 2) if cap in ((8, 0), (9, 0)) or cap >= (10, 0) else (64, 2)


def choose_splits(batch: int, kv_heads: int, max_pages: int, tile_pages: int, sms: int) -> int:
    """Enough programs for two per SM, but never a split with less than one tile of pages."""
    want = -(-2 * sms // (batch * kv_heads))
    return max(1, min(want, -(-max_pages // tile_pages)))


# --8<-- [start:launch]
def paged_decode(q, k_cache, v_cache, block_table, lengths, splits: int | None = None, tile_tokens: int | None = None,
                 num_warps: int = 4, num_stages: int | None = None):
    """q [batch, q_heads, D]; k_cache, v_cache [blocks, block_size, kv_heads, D]; block_table int32 [batch, pages];
    lengths int32 [batch]. Returns [batch, q_heads, D] in q's dtype. splits=None picks split-KV by choose_splits;
    tile_tokens and num_stages default to default_tile(device)."""
    tile, stages = default_tile(q.device)
    tile_tokens, num_stages = tile_tokens or tile, num_stages or stages
    batch, q_heads, dim = q.shape
    _, page, kv_heads, _ = k_cache.shape
    if q_heads % kv_heads or dim & (dim - 1) or dim < 16:
        raise ValueError(f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads}); D ({dim}) a power of 2 >= 16")
    group = q_heads // kv_heads
    tile_pages = max(1, tile_tokens // page)
    max_pages = block_table.shape[1]
    if splits is None:
        splits = choose_splits(batch, kv_heads, max_pages, tile_pages, _sms(q.device))
    pages_per_split = -(-(-(-max_pages // splits)) // tile_pages) * tile_pages
    splits = -(-max_pages // pages_per_split)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # contiguous [batch, q_heads, D]
    common = dict(G=group, G_PAD=max(16, triton.next_power_of_2(group)), D=dim, PAGE=page, TILE_PAGES=tile_pages,
                  DOT_FP32=INTERPRETED, PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
                  num_warps=num_warps, num_stages=num_stages)
    args = (q, k_cache, v_cache, block_table, lengths)
    strides = (q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0))
    scale = 1.0 / math.sqrt(dim)
    if splits == 1:
        _decode_kernel[(batch, kv_heads, 1)](*args, out, out, *strides, out.stride(0), out.stride(1), 0, scale,
                                             pages_per_split, SPLIT=False, **common)
        return out
    part = torch.empty((batch, q_heads, splits, dim), dtype=torch.float32, device=q.device)
    lse = torch.empty((batch, q_heads, splits), dtype=torch.float32, device=q.device)
    _decode_kernel[(batch, kv_heads, splits)](*args, part, lse, *strides, part.stride(0), part.stride(1),
                                              part.stride(2), scale, pages_per_split, SPLIT=True, **common)
    _combine_kernel[(batch * q_heads,)](part, lse, out, splits, S_PAD=triton.next_power_of_2(splits), D=dim)
    return out
# --8<-- [end:launch]


def decode_ref(q, k_cache, v_cache, block_table, lengths):
    """fp32 gather + softmax attention, one sequence at a time."""
    batch, q_heads, dim = q.shape
    group = q_heads // k_cache.shape[2]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(batch):
        n = int(lengths[b])
        pages = block_table[b, :-(-n // k_cache.shape[1])].long()
        k = k_cache[pages].flatten(0, 1)[:n].float().repeat_interleave(group, dim=1)  # [n, q_heads, D]
        v = v_cache[pages].flatten(0, 1)[:n].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[b].float(), k) / math.sqrt(dim)
        out[b] = torch.einsum("hn,nhd->hd", scores.softmax(-1), v)
    return out


def sdpa_contiguous(q, k, v):
    """PyTorch SDPA on a contiguous cache k, v [batch, kv_heads, len, D] (equal lengths): the baseline."""
    return F.scaled_dot_product_attention(q[:, :, None, :], k, v, enable_gqa=True)[:, :, 0, :]
