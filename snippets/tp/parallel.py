"""Megatron-style tensor parallelism, and sequence parallelism on top, written out with torch.distributed.

One transformer layer (pre-norm attention and MLP) split over t ranks: the QKV and first MLP weights by
columns (each rank owns whole heads and a slice of the hidden units), the attention output and second MLP
weights by rows. Four conjugate operators move activations (Shoeybi et al. 2019, section 3; Korthikanti et
al. 2022, section 4.2.2):

  f: identity forward, all-reduce backward        g: all-reduce forward, identity backward     (TP)
  g': all-gather over the sequence forward,       g'-bar: reduce-scatter over the sequence forward,
      reduce-scatter backward                         all-gather backward                        (TP + SP)

Every collective counts the bytes this rank sends on a ring: all-reduce 2(t-1)/t of the tensor,
all-gather and reduce-scatter (t-1)/t of the full tensor.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

SENT = {"bytes": 0}


def _ring(full: torch.Tensor, share: float) -> None:
    t = dist.get_world_size()
    SENT["bytes"] += share * (t - 1) / t * full.numel() * full.element_size()


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous().clone()
    _ring(x, 2)
    dist.all_reduce(x)
    return x


def all_gather_seq(x: torch.Tensor) -> torch.Tensor:
    """[s/t, b, h] on each rank -> [s, b, h] on every rank."""
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    full = torch.cat(parts)
    _ring(full, 1)
    return full


def reduce_scatter_seq(x: torch.Tensor) -> torch.Tensor:
    """[s, b, h] partial sums on each rank -> this rank's [s/t, b, h] of the total."""
    parts = [p.contiguous() for p in x.chunk(dist.get_world_size())]
    out = torch.empty_like(parts[0])
    _ring(x, 1)
    dist.reduce_scatter(out, parts)
    return out


# --8<-- [start:operators]
class CopyToTP(torch.autograd.Function):  # f
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad)  # each rank's slice of the weights gave a partial gradient of x


class ReduceFromTP(torch.autograd.Function):  # g
    @staticmethod
    def forward(ctx, x):
        return all_reduce(x)  # the row-parallel outputs are partial sums

    @staticmethod
    def backward(ctx, grad):
        return grad


class GatherFromSP(torch.autograd.Function):  # g': replaces f when the sequence is split
    @staticmethod
    def forward(ctx, x):
        return all_gather_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return reduce_scatter_seq(grad)


class ScatterToSP(torch.autograd.Function):  # g'-bar: replaces g
    @staticmethod
    def forward(ctx, x):
        return reduce_scatter_seq(x)

    @staticmethod
    def backward(ctx, grad):
        return all_gather_seq(grad)
# --8<-- [end:operators]


def init_layer(h: int, heads: int, seed: int, dtype=torch.float64) -> dict:
    """The unsplit layer's weights (every rank builds the same ones from the seed)."""
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g, dtype=dtype) / math.sqrt(shape[-1])).requires_grad_()

    return {"ln1_w": (1 + 0.1 * torch.randn(h, generator=g, dtype=dtype)).requires_grad_(),
            "qkv": w(3 * h, h), "proj": w(h, h),
            "ln2_w": (1 + 0.1 * torch.randn(h, generator=g, dtype=dtype)).requires_grad_(),
            "fc1": w(4 * h, h), "fc2": w(h, 4 * h), "heads": heads}


def _attention(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """qkv [s, b, 3 * heads * d] (q, k, v per head) -> [s, b, heads * d], causal."""
    s, b, _ = qkv.shape
    q, k, v = qkv.view(s, b, heads, 3, -1).unbind(3)
    q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [b, heads, s, d]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return out.permute(2, 0, 1, 3).reshape(s, b, -1)


def reference_layer(x: torch.Tensor, p: dict) -> torch.Tensor:
    """The unsplit layer: x [s, b, h]."""
    heads = p["heads"]
    a = _attention(F.linear(F.layer_norm(x, x.shape[-1:], p["ln1_w"]), _by_head(p["qkv"], heads)), heads)
    x = x + F.linear(a, p["proj"])
    return x + F.linear(F.gelu(F.linear(F.layer_norm(x, x.shape[-1:], p["ln2_w"]), p["fc1"])), p["fc2"])


def _by_head(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows reordered from [q; k; v] to head-major [(q, k, v) of head 0; head 1; ...]: a column split by rows
    of this matrix then gives every rank whole heads."""
    h = qkv.shape[1]
    return qkv.view(3, heads, h // heads, h).transpose(0, 1).reshape(3 * h, h)


def shard(p: dict, rank: int, t: int) -> dict:
    """This rank's slices: column-parallel QKV (whole heads) and fc1, row-parallel proj and fc2."""
    heads = p["heads"]
    rows = lambda w: w.chunk(t, 0)[rank]  # noqa: E731  output features
    cols = lambda w: w.chunk(t, 1)[rank]  # noqa: E731  input features
    local = {"qkv": rows(_by_head(p["qkv"], heads)), "proj": cols(p["proj"]), "fc1": rows(p["fc1"]),
             "fc2": cols(p["fc2"]), "ln1_w": p["ln1_w"], "ln2_w": p["ln2_w"]}
    local = {k: v.detach().clone().requires_grad_() for k, v in local.items()}
    local["heads"] = heads // t
    return local


# --8<-- [start:layer]
def parallel_layer(x: torch.Tensor, p: dict, sequence_parallel: bool) -> torch.Tensor:
    """x: [s, b, h] on every rank (TP) or this rank's [s/t, b, h] (TP + SP)."""
    enter = GatherFromSP.apply if sequence_parallel else CopyToTP.apply
    leave = ScatterToSP.apply if sequence_parallel else ReduceFromTP.apply
    ln = F.layer_norm(x, x.shape[-1:], p["ln1_w"])  # SP: on s/t tokens, no copy of the whole sequence
    a = _attention(F.linear(enter(ln), p["qkv"]), p["heads"])  # this rank's heads, every token
    x = x + leave(F.linear(a, p["proj"]))  # partial sums over heads: all-reduce, or reduce-scatter
    ln = F.layer_norm(x, x.shape[-1:], p["ln2_w"])
    y = F.linear(F.gelu(F.linear(enter(ln), p["fc1"])), p["fc2"])  # GeLU on a column slice: no sync
    return x + leave(y)
# --8<-- [end:layer]


def comm_formula(s: int, b: int, h: int, t: int, elem: int, sequence_parallel: bool) -> float:
    """Bytes one rank sends per layer, forward and backward: four all-reduces of s*b*h (TP), or four
    all-gathers and four reduce-scatters (TP + SP): the same volume, 8 (t-1)/t s*b*h*elem."""
    per = s * b * h * elem * (t - 1) / t
    return 4 * 2 * per if not sequence_parallel else 8 * per
