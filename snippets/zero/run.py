"""Run DDP, ZeRO-1/2/3 (snippets/zero/stages.py) and PyTorch's FSDP2 on gloo ranks on the CPU, each against
single-process training of the same model on the whole batch (torch.optim.Adam), step by step: the summed
gradients and the updated weights must match. Records each rank's bytes sent per step and bytes held."""
from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn

from snippets.common import gloo
from snippets.common.checks import max_rel_error
from snippets.zero.stages import STRATEGIES, Trainer, comm_formula, memory_formula, tiny_transformer


def reference(units, xs, ys, lr):
    """Single-process training on the whole batch: per step, each unit's flat gradient and flat parameters."""
    model = nn.Sequential(*copy.deepcopy(units))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    out = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        grads = [torch.cat([p.grad.reshape(-1) for p in u.parameters()]) for u in model]
        opt.step()
        out.append((grads, [torch.cat([p.detach().reshape(-1) for p in u.parameters()]) for u in model]))
    return out


def _err(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    return max(max_rel_error(g[:w.numel()], w) for g, w in zip(got, want))


# --8<-- [start:fsdp2]
def fsdp2(units, x, y, lr, steps_ref):
    """FSDP2: fully_shard each unit, then the root, on a CPU mesh; compare with the reference step by step."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = nn.Sequential(*copy.deepcopy(units))
    for unit in model:
        fully_shard(unit, mesh=mesh)  # each unit: one all-gather before use, one reduce-scatter after backward
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=lr)  # on DTensor shards: each rank updates its own
    err = 0.0
    for (xs, ys), (ref_grads, ref_params) in zip(zip(x, y), steps_ref):
        opt.zero_grad()
        nn.functional.mse_loss(model(xs), ys).backward()  # gradients reduce-scattered and averaged
        grads = [torch.cat([p.grad.full_tensor().reshape(-1) for p in u.parameters()]) for u in model]
        opt.step()
        params = [torch.cat([p.full_tensor().reshape(-1) for p in u.parameters()]) for u in model]
        err = max(err, _err(grads, ref_grads), _err(params, ref_params))
    local = lambda ts: sum(t.to_local().numel() * t.element_size() for t in ts)  # noqa: E731
    states = [s[k] for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq")]
    memory = {"params": local(list(model.parameters())), "grads": local([p.grad for p in model.parameters()]),
              "optimizer": local(states)}
    return err, memory
# --8<-- [end:fsdp2]


def _worker(rank, world, cfg):
    import warnings

    warnings.filterwarnings("ignore", message="FSDP2-wrapped module")  # our outputs see no in-place ops
    dtype = getattr(torch, cfg["dtype"])
    units = tiny_transformer(cfg["dim"], cfg["layers"], seed=cfg["seed"], dtype=dtype)
    g = torch.Generator().manual_seed(cfg["seed"] + 1)
    shape = (cfg["steps"], world * cfg["batch"], cfg["seq"], cfg["dim"])
    xs, ys = torch.randn(shape, generator=g, dtype=dtype), torch.randn(shape, generator=g, dtype=dtype)
    steps_ref = reference(units, xs, ys, cfg["lr"])
    mine = slice(rank * cfg["batch"], (rank + 1) * cfg["batch"])  # this rank's part of each batch
    psi = sum(p.numel() for u in units for p in u.parameters())
    elem = torch.empty((), dtype=dtype).element_size()
    result = {"psi": psi, "elem_bytes": elem, "world": world}
    for kind in STRATEGIES:
        t = Trainer(kind, units, lr=cfg["lr"])
        err, sent = 0.0, []
        for (x, y), (ref_grads, ref_params) in zip(zip(xs, ys), steps_ref):
            before = t.comm.sent
            t.step(x[mine], y[mine])
            sent.append(t.comm.sent - before)
            err = max(err, _err(t.gathered("grads"), ref_grads), _err(t.gathered("params"), ref_params))
        result[kind] = {"max_rel_error": err, "sent_bytes_per_step": sent, "memory": t.memory(),
                        "comm_formula": comm_formula(kind, psi, world, elem),
                        "memory_formula": memory_formula(kind, psi, world, elem, elem, 2 * elem)}
    try:
        err, memory = fsdp2(units, xs[:, mine], ys[:, mine], cfg["lr"], steps_ref)
        result["fsdp2"] = {"max_rel_error": err, "memory": memory,
                           "memory_formula": memory_formula("zero3", psi, world, elem, elem, 2 * elem)}
    except Exception as e:  # noqa: BLE001 -- reported, not hidden: the caller decides whether FSDP2 must run
        result["fsdp2"] = {"error": f"{type(e).__name__}: {e}"}
    return result


def run(world: int = 4, dim: int = 32, layers: int = 2, seq: int = 8, batch: int = 2, steps: int = 3,
        lr: float = 1e-2, dtype: str = "float64", seed: int = 0) -> dict:
    """Spawn `world` gloo ranks; return each rank's errors, bytes sent per step and bytes held, with the
    formulas, keyed by rank."""
    cfg = dict(dim=dim, layers=layers, seq=seq, batch=batch, steps=steps, lr=lr, dtype=dtype, seed=seed)
    return gloo.spawn(_worker, world, cfg)


def rel(got: float, want: float) -> float:
    return abs(got - want) / want
