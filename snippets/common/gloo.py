"""Run one function on `world` gloo ranks on the CPU, each in a spawned process, and collect what each returns."""
from __future__ import annotations

import io
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank(rank: int, world: int, port: int, fn, cfg: dict, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    buf = io.BytesIO()
    torch.save(fn(rank, world, cfg), buf)  # as bytes: a tensor shared by reference would die with this process
    out.put((rank, buf.getvalue()))
    dist.destroy_process_group()


def spawn(fn, world: int, cfg: dict, timeout_s: float = 300) -> dict:
    """{rank: fn(rank, world, cfg)}; fn must be importable (a module-level function), as spawn pickles it."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, fn, cfg, out)) for r in range(world)]
    for p in procs:
        p.start()
    results = {r: torch.load(io.BytesIO(b), weights_only=True) for r, b in (out.get(timeout=timeout_s) for _ in procs)}
    for p in procs:
        p.join(60)
        if p.exitcode != 0:
            raise RuntimeError(f"rank process exited with {p.exitcode}")
    return results
