"""Expert parallelism: each rank holds experts/world of the experts; tokens go to the rank that holds their
expert and come back, by two all-to-alls (dispatch and combine), with the split sizes exchanged first. The
result must equal the single-process MoE layer's exactly up to floating-point order."""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F


# --8<-- [start:layer]
def expert_mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return F.gelu(x @ w1) @ w2


def moe_reference(x, router, w1, w2, k):
    """All experts in one process: y = sum over the k chosen experts of gate * expert(x)."""
    scores = torch.sigmoid(x @ router)
    chosen = scores.topk(k, -1).indices
    gates = scores.gather(-1, chosen)
    gates = gates / gates.sum(-1, keepdim=True)
    y = torch.zeros_like(x)
    for slot in range(k):
        for e in chosen[:, slot].unique().tolist():
            rows = (chosen[:, slot] == e).nonzero()[:, 0]
            y[rows] += gates[rows, slot, None] * expert_mlp(x[rows], w1[e], w2[e])
    return y
# --8<-- [end:layer]


# --8<-- [start:ep]
def moe_expert_parallel(x, router, w1_local, w2_local, k, group=None) -> tuple[torch.Tensor, dict]:
    """This rank's tokens x [tokens, dim]; its experts w1_local/w2_local [experts/world, ...]; the router is
    replicated. Returns (y, stats: bytes sent in each all-to-all)."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    local = w1_local.shape[0]
    scores = torch.sigmoid(x @ router)
    chosen = scores.topk(k, -1).indices
    gates = scores.gather(-1, chosen)
    gates = gates / gates.sum(-1, keepdim=True)
    token = torch.arange(x.shape[0]).repeat_interleave(k)  # one entry per (token, slot)
    expert = chosen.flatten()
    order = torch.argsort(expert // local, stable=True)  # grouped by destination rank
    token, expert = token[order], expert[order]
    send_counts = torch.bincount(expert // local, minlength=world)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)  # split sizes first
    send, recv = send_counts.tolist(), recv_counts.tolist()
    x_in = torch.empty((sum(recv), x.shape[1]), dtype=x.dtype)
    dist.all_to_all_single(x_in, x[token].contiguous(), recv, send, group=group)  # dispatch
    e_in = torch.empty(sum(recv), dtype=expert.dtype)
    dist.all_to_all_single(e_in, expert.contiguous(), recv, send, group=group)
    y_in = torch.empty_like(x_in)
    for e in e_in.unique().tolist():  # the experts this rank holds
        rows = (e_in == e).nonzero()[:, 0]
        y_in[rows] = expert_mlp(x_in[rows], w1_local[e - rank * local], w2_local[e - rank * local])
    y_back = torch.empty((sum(send), x.shape[1]), dtype=x.dtype)
    dist.all_to_all_single(y_back, y_in, send, recv, group=group)  # combine
    y = torch.zeros_like(x)
    slot_gate = gates.flatten()[order]
    y.index_add_(0, token, slot_gate[:, None] * y_back)
    elt = x.element_size()
    return y, {"dispatch_bytes": int(sum(send)) * x.shape[1] * elt, "combine_bytes": int(sum(recv)) * x.shape[1] * elt}
# --8<-- [end:ep]
