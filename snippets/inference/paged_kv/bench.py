"""The paged-KV lab's measurements. Every variant is checked against the fp32 reference on fresh random
inputs before it is timed (snippets.common.timing: medians, L2 flushed); decode steps run as CUDA graph replays. Bandwidth counts the K and V bytes a
decode step must read (plus q and the output), as a fraction of the copy bandwidth measured in the same run."""
from __future__ import annotations

import torch

from snippets.common.checks import fresh_seed, rel_error
from snippets.common.timing import bench_ms, graphed
from snippets.inference.paged_kv import attention as pa

TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def check(name, out, ref, tol):
    err = rel_error(out, ref)
    if not err <= tol:
        raise AssertionError(f"{name}: relative error {err:.3g} over {tol:g}")
    return err


def make_cache(batch, context, page, kv_heads, dim, dtype, device, layout="scattered", seed=None, lengths=None):
    """K/V pool, block table and lengths for `batch` sequences of `context` tokens (or `lengths`). scattered:
    each sequence's blocks are a random sample of the pool, as after many allocations and frees; sequential:
    sequence b owns blocks b * pages .. (b + 1) * pages - 1, i.e. a contiguous cache read through a table."""
    g = torch.Generator(device).manual_seed(seed if seed is not None else fresh_seed())
    lengths = lengths or [context] * batch
    pages = -(-max(lengths) // page)
    total = batch * pages
    order = torch.randperm(total, generator=g, device=device) if layout == "scattered" else \
        torch.arange(total, device=device)
    table = order.view(batch, pages).int()
    k = torch.randn(total, page, kv_heads, dim, generator=g, device=device, dtype=dtype)
    v = torch.randn(total, page, kv_heads, dim, generator=g, device=device, dtype=dtype)
    return k, v, table, torch.tensor(lengths, dtype=torch.int32, device=device)


def kv_bytes(lengths, kv_heads, dim, elt, q_heads) -> int:
    """K and V of every cached token once, plus q in and the output out."""
    return int(sum(lengths)) * kv_heads * dim * 2 * elt + 2 * len(lengths) * q_heads * dim * elt


def decode(batch, context, page, q_heads, kv_heads, dim, dtype, device, layout="scattered", splits=None,
           tile_tokens=None, num_warps=4) -> dict:
    """Check, then time one decode step of the Triton kernel; ms and GB/s."""
    k, v, table, lens = make_cache(batch, context, page, kv_heads, dim, dtype, device, layout)
    q = torch.randn(batch, q_heads, dim, device=device, dtype=dtype)
    run = graphed(lambda: pa.paged_decode(q, k, v, table, lens, splits, tile_tokens, num_warps), device)
    check(f"paged decode b={batch} ctx={context} page={page} {layout} splits={splits}", run(),
          pa.decode_ref(q, k, v, table, lens), TOL[dtype])
    ms = bench_ms(run, device)
    return {"ms": ms, "gbps": kv_bytes(lens.tolist(), kv_heads, dim, k.element_size(), q_heads) / ms / 1e6}


def sdpa(batch, context, q_heads, kv_heads, dim, dtype, device) -> dict:
    """PyTorch SDPA on a contiguous [batch, kv_heads, context, D] cache (equal lengths)."""
    k = torch.randn(batch, kv_heads, context, dim, device=device, dtype=dtype)
    v = torch.randn_like(k)
    q = torch.randn(batch, q_heads, dim, device=device, dtype=dtype)
    run = graphed(lambda: pa.sdpa_contiguous(q, k, v), device)
    out = run()
    table = torch.arange(batch, device=device, dtype=torch.int32)[:, None]
    ref = pa.decode_ref(q, k.permute(0, 2, 1, 3), v.permute(0, 2, 1, 3), table,
                        torch.full((batch,), context, dtype=torch.int32))
    check(f"sdpa b={batch} ctx={context}", out, ref, TOL[dtype])
    ms = bench_ms(run, device)
    return {"ms": ms, "gbps": kv_bytes([context] * batch, kv_heads, dim, k.element_size(), q_heads) / ms / 1e6}


def flex_paged(batch, context, page, q_heads, kv_heads, dim, dtype, device) -> dict:
    """FlexAttention with its (private, experimental) PagedAttention helper, compiled: the same decode step."""
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    pages = -(-context // page)
    n_pages = batch * pages
    paged = PagedAttention(n_pages, page, batch, device=device)
    lens = torch.full((batch,), context, dtype=torch.int64, device=device)
    for b in range(batch):
        paged.reserve(torch.tensor(b, device=device), lens[b])
    k_val = torch.randn(batch, kv_heads, context, dim, device=device, dtype=dtype)
    v_val = torch.randn_like(k_val)
    k_cache = torch.zeros(1, kv_heads, n_pages * page, dim, device=device, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    pos = torch.arange(context, device=device)[None].expand(batch, -1)
    paged.assign(torch.arange(batch, device=device), pos, k_val, v_val, k_cache, v_cache)

    def in_length(b, h, q_idx, kv_idx):
        return kv_idx < lens[b]

    logical = create_block_mask(in_length, batch, None, 1, context, device=device, BLOCK_SIZE=(128, page))
    mask = paged.convert_logical_block_mask(logical, kv_len=lens)
    score_mod = paged.get_score_mod(None, kv_len=lens)
    q = torch.randn(batch, q_heads, 1, dim, device=device, dtype=dtype)
    fn = torch.compile(flex_attention, dynamic=False)
    run = lambda: fn(q, k_cache, v_cache, score_mod=score_mod, block_mask=mask, enable_gqa=True)  # noqa: E731
    ref = pa.sdpa_contiguous(q[:, :, 0].float(), k_val.float(), v_val.float())
    check(f"flex paged b={batch} ctx={context}", run()[:, :, 0], ref, TOL[dtype])
    ms = bench_ms(run, device)
    return {"ms": ms, "gbps": kv_bytes([context] * batch, kv_heads, dim, k_cache.element_size(), q_heads) / ms / 1e6}
