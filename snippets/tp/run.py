"""Run the tensor-parallel layer (snippets/tp/parallel.py) on t gloo ranks on the CPU, with and without
sequence parallelism, against the unsplit layer: the output, the input's gradient and every weight's
gradient must match. Records the bytes each rank sends and the bytes of activations it saves for backward."""
from __future__ import annotations

import torch
import torch.distributed as dist

from snippets.common import gloo
from snippets.common.checks import max_rel_error
from snippets.tp import parallel as tp


def saved_bytes(fn):
    """Run fn() and count the bytes of the distinct tensors autograd saves for backward."""
    seen = {}

    def pack(t):
        seen[(t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def _full_grad(local: torch.Tensor, rank: int, t: int, dim: int | None) -> torch.Tensor:
    """Gather a sharded gradient back to the full shape (for the check only: not counted)."""
    if dim is None:
        return local
    parts = [torch.empty_like(local) for _ in range(t)]
    dist.all_gather(parts, local.contiguous())
    return torch.cat(parts, dim)


def _worker(rank: int, t: int, cfg: dict) -> dict:
    s, b, h = cfg["seq"], cfg["batch"], cfg["hidden"]
    p = tp.init_layer(h, cfg["heads"], cfg["seed"])
    x = torch.randn(s, b, h, generator=torch.Generator().manual_seed(cfg["seed"] + 1), dtype=torch.float64)
    x_ref = x.clone().requires_grad_()
    y_ref, ref_saved = saved_bytes(lambda: tp.reference_layer(x_ref, p))
    dy = torch.randn(y_ref.shape, generator=torch.Generator().manual_seed(cfg["seed"] + 2), dtype=y_ref.dtype)
    y_ref.backward(dy)
    ref_grads = {"ln1_w": p["ln1_w"].grad, "ln2_w": p["ln2_w"].grad, "fc1": p["fc1"].grad, "fc2": p["fc2"].grad,
                 "proj": p["proj"].grad, "qkv": tp._by_head(p["qkv"].grad, cfg["heads"])}
    result = {"reference_saved_bytes": ref_saved}
    for sp in (False, True):
        local = tp.shard(p, rank, t)
        mine = x.chunk(t)[rank] if sp else x
        xl = mine.clone().requires_grad_()
        tp.SENT["bytes"] = 0
        y, saved = saved_bytes(lambda: tp.parallel_layer(xl, local, sp))
        y.backward(dy.chunk(t)[rank] if sp else dy)
        sent = tp.SENT["bytes"]
        err = max_rel_error(y, y_ref.chunk(t)[rank] if sp else y_ref)
        gx = _full_grad(xl.grad, rank, t, 0 if sp else None)
        err = max(err, max_rel_error(gx, x_ref.grad))
        for name, dim in (("qkv", 0), ("fc1", 0), ("proj", 1), ("fc2", 1), ("ln1_w", None), ("ln2_w", None)):
            g = local[name].grad
            if name.startswith("ln"):  # replicated: each rank holds its part of the sum (SP) or the whole
                g = g.clone()
                if sp:
                    dist.all_reduce(g)
            err = max(err, max_rel_error(_full_grad(g, rank, t, dim), ref_grads[name]))
        result["sp" if sp else "tp"] = {"max_rel_error": err, "sent_bytes": sent, "saved_bytes": saved,
                                        "comm_formula": tp.comm_formula(s, b, h, t, 8, sp)}
    return result


def run(world: int = 4, seq: int = 16, batch: int = 2, hidden: int = 64, heads: int = 8, seed: int = 0) -> dict:
    """{rank: {"tp": {...}, "sp": {...}, "reference_saved_bytes": n}}"""
    cfg = dict(seq=seq, batch=batch, hidden=hidden, heads=heads, seed=seed)
    return gloo.spawn(_worker, world, cfg)


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)
