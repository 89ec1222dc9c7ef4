"""Causal attention over a sequence split across t ranks, two ways, written out with torch.distributed.

Ring attention (Liu et al. 2023): each rank keeps its queries and passes its key/value block around the
ring; every step attends to one block and merges it into the running output with log-sum-exp, so the
full scores are never held. The causal mask makes early tokens cheap and late ones expensive, so each
rank holds two chunks, i and 2t-1-i ("zigzag"), and every rank does the same work.

Ulysses (Jacobs et al. 2023): an all-to-all turns sequence shards into head shards; each rank runs full
attention on s tokens for H/t heads, and a second all-to-all turns the output back. t must divide H.

Both count the bytes this rank sends.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

SENT = {"bytes": 0, "pairs": 0}  # bytes this rank sent; (query, key) pairs it scored under the causal mask


def reference(q, k, v):
    """Full causal attention, [b, H, s, d]."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def zigzag(s: int, t: int, rank: int) -> torch.Tensor:
    """Token positions of this rank: chunks rank and 2t-1-rank of 2t equal chunks."""
    c = s // (2 * t)
    return torch.cat([torch.arange(rank * c, (rank + 1) * c), torch.arange((2 * t - 1 - rank) * c, (2 * t - rank) * c)])


def _pass(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Send to the next rank on the ring, receive from the previous one."""
    t, r = dist.get_world_size(), dist.get_rank()
    out = [torch.empty_like(x) for x in tensors]
    ops = [dist.P2POp(dist.isend, x.contiguous(), (r + 1) % t) for x in tensors]
    ops += [dist.P2POp(dist.irecv, y, (r - 1) % t) for y in out]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    SENT["bytes"] += sum(x.numel() * x.element_size() for x in tensors)
    return out


def _scores(q, k, pq, pk, scale):
    s = q @ k.transpose(-1, -2) * scale
    return s.masked_fill(pq[:, None] < pk[None, :], float("-inf"))


# --8<-- [start:ring]
class RingAttention(torch.autograd.Function):
    """q, k, v: this rank's [b, H, 2c, d] at positions `pos` (zigzag). Forward: t steps, t-1 passes of
    (k, v). Backward: t steps, t-1 passes of (k, v, dk, dv), then (dk, dv) go home."""

    @staticmethod
    def forward(ctx, q, k, v, s):
        t, r = dist.get_world_size(), dist.get_rank()
        scale, pq = q.shape[-1] ** -0.5, zigzag(s, t, r)
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"), dtype=q.dtype)
        kv = [k, v]
        for step in range(t):
            pk = zigzag(s, t, (r - step) % t)  # whose block this is follows from the step
            scores = _scores(q, kv[0], pq, pk, scale)
            SENT["pairs"] += int((pq[:, None] >= pk[None, :]).sum())
            new = torch.logaddexp(lse, torch.logsumexp(scores, -1))  # finite: step 0 holds the diagonal
            out = out * torch.exp(lse - new)[..., None] + torch.exp(scores - new[..., None]) @ kv[1]
            lse = new
            if step < t - 1:
                kv = _pass(kv)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.s = s
        return out
# --8<-- [end:ring]

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        t, r = dist.get_world_size(), dist.get_rank()
        scale, pq = q.shape[-1] ** -0.5, zigzag(ctx.s, t, r)
        delta = (dout * out).sum(-1, keepdim=True)
        dq = torch.zeros_like(q)
        blk = [k, v, torch.zeros_like(k), torch.zeros_like(v)]
        for step in range(t):
            pk = zigzag(ctx.s, t, (r - step) % t)
            p = torch.exp(_scores(q, blk[0], pq, pk, scale) - lse[..., None])
            ds = p * (dout @ blk[1].transpose(-1, -2) - delta)
            dq += ds @ blk[0] * scale
            blk[2] = blk[2] + ds.transpose(-1, -2) @ q * scale
            blk[3] = blk[3] + p.transpose(-1, -2) @ dout
            blk = _pass(blk) if step < t - 1 else blk
        dk, dv = _pass(blk[2:])  # the block's gradients return to its owner
        return dq, dk, dv, None


class _SeqToHeads(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return seq_to_heads(x)

    @staticmethod
    def backward(ctx, g):
        return heads_to_seq(g)


class _HeadsToSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return heads_to_seq(x)

    @staticmethod
    def backward(ctx, g):
        return seq_to_heads(g)


def _all_to_all(x: torch.Tensor) -> torch.Tensor:
    """x: [t, ...], slice j goes to rank j; returns [t, ...], slice j from rank j."""
    x = x.contiguous()
    out = torch.empty_like(x)  # empty_like(view) would copy the view's strides; gloo writes rows in order
    dist.all_to_all_single(out, x)
    SENT["bytes"] += x.numel() * x.element_size() * (x.shape[0] - 1) // x.shape[0]
    return out


def seq_to_heads(x: torch.Tensor) -> torch.Tensor:
    """[b, H, s/t, d] (this rank's tokens, all heads) -> [b, H/t, s, d] (all tokens, this rank's heads)."""
    t = dist.get_world_size()
    b, h, n, d = x.shape
    parts = _all_to_all(x.reshape(b, t, h // t, n, d).transpose(0, 1))  # [src rank, b, H/t, s/t, d]
    return parts.permute(1, 2, 0, 3, 4).reshape(b, h // t, t * n, d)


def heads_to_seq(x: torch.Tensor) -> torch.Tensor:
    """[b, H/t, s, d] -> [b, H, s/t, d]: the inverse."""
    t = dist.get_world_size()
    b, g, s, d = x.shape
    parts = _all_to_all(x.reshape(b, g, t, s // t, d).permute(2, 0, 1, 3, 4))  # [src rank's heads, b, H/t, s/t, d]
    return parts.transpose(0, 1).reshape(b, t * g, s // t, d)


# --8<-- [start:ulysses]
def ulysses(q, k, v):
    """q, k, v: this rank's contiguous [b, H, s/t, d]; returns this rank's output shard."""
    t, heads = dist.get_world_size(), q.shape[1]
    if heads % t:
        raise ValueError(f"Ulysses needs the ranks ({t}) to divide the heads ({heads})")
    q, k, v = (_SeqToHeads.apply(x) for x in (q, k, v))  # all tokens, H/t heads
    return _HeadsToSeq.apply(reference(q, k, v))
# --8<-- [end:ulysses]


def comm_formula(kind: str, b: int, heads: int, s: int, d: int, t: int, elem: int) -> float:
    """Bytes one rank sends, forward and backward. blk = one rank's share of one of q, k, v."""
    blk = b * heads * (s // t) * d * elem
    if kind == "ring":
        return (2 * (t - 1) + 4 * (t - 1) + 2) * blk  # (k, v) forward; (k, v, dk, dv) back; (dk, dv) home
    return 8 * blk * (t - 1) / t  # q, k, v and the output, each way
