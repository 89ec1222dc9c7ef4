"""Ring attention and Ulysses (snippets/cp/attention.py) on t gloo ranks on the CPU against full causal
attention: the output and the gradients of q, k and v must match; records the bytes each rank sends."""
from __future__ import annotations

import torch

from snippets.common import gloo
from snippets.common.checks import max_rel_error
from snippets.cp import attention as cp


def _worker(rank: int, t: int, cfg: dict) -> dict:
    b, h, s, d = cfg["batch"], cfg["heads"], cfg["seq"], cfg["dim"]
    g = torch.Generator().manual_seed(cfg["seed"])
    q, k, v, dout = (torch.randn(b, h, s, d, generator=g, dtype=torch.float64) for _ in range(4))
    full = [x.clone().requires_grad_() for x in (q, k, v)]
    ref = cp.reference(*full)
    ref.backward(dout)
    result = {}
    for kind in ("ring", "ulysses"):
        idx = cp.zigzag(s, t, rank) if kind == "ring" else torch.arange(rank * s // t, (rank + 1) * s // t)
        mine = [x[:, :, idx].clone().requires_grad_() for x in (q, k, v)]
        cp.SENT.update(bytes=0, pairs=0)
        o = cp.RingAttention.apply(*mine, s) if kind == "ring" else cp.ulysses(*mine)
        o.backward(dout[:, :, idx])
        err = max_rel_error(o, ref[:, :, idx])
        for x, xf in zip(mine, full):
            err = max(err, max_rel_error(x.grad, xf.grad[:, :, idx]))
        result[kind] = {"max_rel_error": err, "sent_bytes": cp.SENT["bytes"], "causal_pairs": cp.SENT["pairs"],
                        "comm_formula": cp.comm_formula(kind, b, h, s, d, t, 8)}
    try:
        cp.ulysses(*(x[:, :1, :s // t] for x in (q, k, v)))  # one head on t ranks
        result["one_head"] = "ran"
    except ValueError as e:
        result["one_head"] = str(e)
    return result


def run(world: int = 4, batch: int = 1, heads: int = 4, seq: int = 32, dim: int = 8, seed: int = 0) -> dict:
    """{rank: {"ring": {...}, "ulysses": {...}, "one_head": why Ulysses refused one head}}"""
    cfg = dict(batch=batch, heads=heads, seq=seq, dim=dim, seed=seed)
    return gloo.spawn(_worker, world, cfg)


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)
