"""Expert parallelism: each rank holds experts/world of the experts; tokens go to the rank that holds their
expert and come back, by two all-to-alls (dispatch and combine), with the split sizes exchanged first. The
result must equal the single-process MoE layer's exactly up to floating-point order."""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F

from snippets.common.timing import host_ms


def expert_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.gelu(x @ w1) @ w2


def capacity_keep(chosen: torch.Tensor, experts: int, capacity_factor: float | None) -> torch.Tensor:
    """[tokens, k] bool: the (token, slot) assignments that fit their expert's capacity, ceil(capacity_factor *
    tokens * k / experts) each (Switch, GShard). First choices are served before second ones and earlier tokens
    before later ones; a dropped assignment contributes nothing (the residual path carries the token). None:
    no capacity, nothing dropped."""
    if capacity_factor is None:
        return torch.ones_like(chosen, dtype=torch.bool)
    tokens, k = chosen.shape
    capacity = math.ceil(capacity_factor * tokens * k / experts)
    onehot = F.one_hot(chosen.T.flatten(), experts)  # slot-major: all first choices, then all second ones
    position = (onehot.cumsum(0) * onehot).sum(-1) - 1  # how many came before, at the same expert
    return (position < capacity).view(k, tokens).T


def moe_reference(x, router, w1, w2, k, chosen=None, capacity_factor=None):
    """All experts in one process: y = sum over the k chosen experts of gate * expert(x). `chosen` imposes the
    choices (another precision may break a near-tie between two experts' scores the other way)."""
    scores = torch.sigmoid(x @ router)
    chosen = scores.topk(k, -1).indices if chosen is None else chosen
    gates = scores.gather(-1, chosen)
    gates = gates / gates.sum(-1, keepdim=True)
    gates = gates * capacity_keep(chosen, router.shape[1], capacity_factor)
    y = torch.zeros_like(x)
    for slot in range(k):
        for e in chosen[:, slot].unique().tolist():
            rows = (chosen[:, slot] == e).nonzero()[:, 0]
            y[rows] += gates[rows, slot, None] * expert_mlp(x[rows], w1[e], w2[e])
    return y


# --8<-- [start:ep]
def moe_expert_parallel(x, router, w1_local, w2_local, k, group=None,
                        capacity_factor: float | None = None) -> tuple[torch.Tensor, dict]:
    """This rank's tokens x [tokens, dim]; its experts w1_local/w2_local [experts/world, ...]; the router is
    replicated. capacity_factor: each expert takes at most ceil(factor * tokens * k / experts) of this rank's
    assignments, and the rest are dropped before dispatch (capacity_keep). Returns (y, stats: bytes sent in each
    all-to-all, the fraction of assignments dropped, and the experts chosen for each token)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    local = w1_local.shape[0]
    scores = torch.sigmoid(x @ router)
    chosen = scores.topk(k, -1).indices
    gates = scores.gather(-1, chosen)
    gates = gates / gates.sum(-1, keepdim=True)
    keep = capacity_keep(chosen, router.shape[1], capacity_factor).flatten()
    token = torch.arange(x.shape[0], device=x.device).repeat_interleave(k)[keep]  # one entry per kept (token, slot)
    expert, slot_gate = chosen.flatten()[keep], gates.flatten()[keep]
    order = torch.argsort(expert // local, stable=True)  # grouped by destination rank
    token, expert, slot_gate = token[order], expert[order], slot_gate[order]
    send_counts = torch.bincount(expert // local, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)  # split sizes first
    send, recv = send_counts.tolist(), recv_counts.tolist()
    x_in = torch.empty((sum(recv), x.shape[1]), dtype=x.dtype, device=x.device)
    dist.all_to_all_single(x_in, x[token].contiguous(), recv, send, group=group)  # dispatch
    e_in = torch.empty(sum(recv), dtype=expert.dtype, device=x.device)
    dist.all_to_all_single(e_in, expert.contiguous(), recv, send, group=group)
    y_in = torch.empty_like(x_in)
    for e in e_in.unique().tolist():  # the experts this rank holds
        rows = (e_in == e).nonzero()[:, 0]
        y_in[rows] = expert_mlp(x_in[rows], w1_local[e - rank * local], w2_local[e - rank * local])
    y_back = torch.empty((sum(send), x.shape[1]), dtype=x.dtype, device=x.device)
    dist.all_to_all_single(y_back, y_in, send, recv, group=group)  # combine
    y = torch.zeros_like(x)
    y.index_add_(0, token, slot_gate[:, None] * y_back)
    elt = x.element_size()
    return y, {"dispatch_bytes": int(sum(send)) * x.shape[1] * elt, "combine_bytes": int(sum(recv)) * x.shape[1] * elt,
               "dropped_fraction": 1.0 - float(keep.double().mean()), "chosen": chosen}
# --8<-- [end:ep]


def _worker(rank, world, backend, port, cfg, out):
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=world, device_id=dev if backend == "nccl" else None)
    g = torch.Generator().manual_seed(cfg["seed"])
    dim, experts, k, tokens = cfg["dim"], cfg["experts"], cfg["k"], cfg["tokens"]
    router = torch.randn(dim, experts, generator=g) / dim**0.5  # unscaled, fp32 sigmoids saturate to 1.0: ties
    w1 = torch.randn(experts, dim, 2 * dim, generator=g) / dim**0.5
    w2 = torch.randn(experts, 2 * dim, dim, generator=g) / (2 * dim) ** 0.5
    x_all = torch.randn(world * tokens, dim, generator=g)
    local = experts // world
    x = x_all[rank * tokens:(rank + 1) * tokens]
    to = lambda *ts: [t.to(dev) for t in ts]  # noqa: E731
    xs, rs, w1s, w2s = to(x, router, w1[rank * local:(rank + 1) * local], w2[rank * local:(rank + 1) * local])
    cf = cfg["capacity_factor"]
    y, stats = moe_expert_parallel(xs, rs, w1s, w2s, k, capacity_factor=cf)
    chosen = stats.pop("chosen").cpu()
    ref = moe_reference(x.double(), router.double(), w1.double(), w2.double(), k, chosen, capacity_factor=cf)
    err = float(((y.double().cpu() - ref).norm() / ref.norm()))
    own = torch.sigmoid(x.double() @ router.double()).topk(k, -1).indices  # fp64's own choices, for the record
    same = float((own.sort(-1).values == chosen.sort(-1).values).all(-1).double().mean())

    def median_seconds(fn):  # host clock: the layer's host work (routing, splits) is part of its cost
        return host_ms(fn, reps=cfg["reps"], warmup=0, device=dev, before=dist.barrier) / 1e3

    # the whole layer (routing, drops, both all-to-alls, the experts), then the dispatch alone with even splits
    layer = median_seconds(lambda: moe_expert_parallel(xs, rs, w1s, w2s, k, capacity_factor=cf))
    send = torch.randn(tokens * k, dim, device=dev)
    recv = torch.empty_like(send)
    seconds = median_seconds(lambda: dist.all_to_all_single(recv, send))
    moved = send.numel() * send.element_size() * (world - 1) / world  # what leaves this rank
    out[rank] = {"relative_error": err, "same_choice_as_fp64": same, "layer_ms": 1e3 * layer,
                 "dispatch_ms": 1e3 * seconds, "dispatch_gbps": moved / seconds / 1e9, **stats}
    dist.destroy_process_group()


def run(backend: str = "gloo", world: int = 2, tokens: int = 4096, dim: int = 1024, experts: int = 8, k: int = 2,
        reps: int = 20, seed: int = 0, capacity_factor: float | None = None) -> dict:
    """Spawn `world` ranks, run the expert-parallel layer against the reference (with the same drops, given a
    capacity factor), time the whole layer and the dispatch alone."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.Manager().dict()
    cfg = dict(tokens=tokens, dim=dim, experts=experts, k=k, reps=reps, seed=seed, capacity_factor=capacity_factor)
    mp.spawn(_worker, args=(world, backend, port, cfg, out), nprocs=world, join=True)
    return dict(out)
