"""Distributed checkpoints with torch.distributed.checkpoint (DCP) on gloo ranks on the CPU.

Four ranks train a small model sharded with FSDP2 and save model and optimizer state with dcp.save, each
rank writing its own shards plus shared metadata. Two ranks then load the same checkpoint into a model
sharded two ways: DCP reads the metadata and each new rank pulls the pieces of the old shards it needs
(resharding). Every tensor, as a full tensor, must equal the one saved, bit for bit. Then dcp.async_save:
the step is blocked only while the state is staged (copied); writing happens in the background while
training goes on, and the checkpoint holds the state at the step it was taken, not a later one.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def make_model(dim: int, layers: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
                           for _ in range(layers)])


def sharded(dim: int, layers: int, seed: int):
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model = make_model(dim, layers, seed)
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def train(model, opt, steps: int, dim: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed + dist.get_rank())
    for _ in range(steps):
        x = torch.randn(8, dim, generator=g)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()


def full(state: dict) -> dict:
    """Every tensor of a (nested) state dict as a full, plain tensor: DTensor shards gathered."""
    out = {}
    for k, v in state.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": vv for kk, vv in full(v).items()})
        elif isinstance(v, torch.Tensor):
            out[k] = (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
    return out


# --8<-- [start:save]
def save(path: str, dim: int, layers: int, steps: int, seed: int) -> dict:
    """On every rank of the saving job: train, save synchronously, return the full tensors saved."""
    model, opt = sharded(dim, layers, seed)
    train(model, opt, steps, dim, seed)
    model_sd, optim_sd = get_state_dict(model, opt)
    t0 = time.perf_counter()
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)  # each rank writes its shards
    return {"full": full({"model": model_sd, "optim": optim_sd}), "save_s": time.perf_counter() - t0}


def load(path: str, dim: int, layers: int, seed: int, really: bool = True) -> dict:
    """On every rank of the loading job, whatever its size: load in place, resharding as needed
    (really=False skips the load: the control that shows the comparison can fail)."""
    model, opt = sharded(dim, layers, seed + 1)  # different weights: the load must replace them all
    train(model, opt, 1, dim, seed)  # creates Adam's state, which the load overwrites
    model_sd, optim_sd = get_state_dict(model, opt)
    state = {"model": model_sd, "optim": optim_sd}
    if really:
        dcp.load(state, checkpoint_id=path)  # reads the metadata, pulls the pieces this rank's shards need
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return full(state)
# --8<-- [end:save]


# --8<-- [start:async]
def async_roundtrip(path: str, dim: int, layers: int, seed: int, steps_after: int) -> dict:
    """Blocked time of dcp.async_save against dcp.save, and which step the async checkpoint holds."""
    model, opt = sharded(dim, layers, seed)
    train(model, opt, 2, dim, seed)
    model_sd, optim_sd = get_state_dict(model, opt)
    taken = full({"model": model_sd})
    t0 = time.perf_counter()
    dcp.save({"model": model_sd}, checkpoint_id=f"{path}/sync")
    sync_s = time.perf_counter() - t0
    group = dist.new_group(backend="gloo")  # its own group: its collectives run beside training's
    t0 = time.perf_counter()
    future = dcp.async_save({"model": model_sd}, checkpoint_id=f"{path}/async", process_group=group)
    blocked_s = time.perf_counter() - t0
    train(model, opt, steps_after, dim, seed)  # training goes on while the checkpoint is written
    future.result()
    later = full({"model": get_state_dict(model, opt)[0]})
    fresh, _ = sharded(dim, layers, seed + 7)
    sd = fresh.state_dict()
    dcp.load({"model": sd}, checkpoint_id=f"{path}/async")
    loaded = full({"model": sd})
    return {"sync_s": sync_s, "blocked_s": blocked_s,
            "holds_the_step_taken": all(torch.equal(loaded[k], taken[k]) for k in taken),
            "differs_from_later": any(not torch.equal(loaded[k], later[k]) for k in later)}
# --8<-- [end:async]
