"""Collective bandwidth the way nccl-tests reports it: algbw, busbw, and a sweep over message sizes.

algbw = S / t. busbw = algbw x a factor that makes the number comparable with the speed of the
hardware bottleneck (NVLink, PCIe, network) whatever the number of ranks n
(NVIDIA/nccl-tests doc/PERFORMANCE.md):

    all_reduce                                2 (n - 1) / n
    all_gather, reduce_scatter, all_to_all      (n - 1) / n
    broadcast, reduce                           1

S is the size nccl-tests prints: the buffer of all_reduce and broadcast; for all_gather and
reduce_scatter the *total* array, per-rank count x n x dtype size. GB/s means 1e9 bytes per second,
one direction.

`sweep` runs one process per rank with torch.distributed: gloo on the CPU (CI, tiny sizes) or NCCL
with one GPU per rank. NCCL_NVLS_ENABLE=0 is always set in the ranks, so NVLink SHARP (multicast)
stays off and the numbers are those of plain ring/tree algorithms. On the two-H200 machine of the
lab, NCCL's own topology model in its INFO log reads `=== System : maxBw 370.8 totalBw 370.8 ===`
(GB/s between the GPUs over NVLink, tests/fixtures/nccl/info); the nominal link rate to compare with
is a parameter of `plot`, not a constant of this module.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from snippets.common.checks import poisoned_empty
from snippets.common.timing import events_ms, host_ms

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce")


def canonical(op: str) -> str:
    """'AllReduce', 'allreduce', 'all-reduce' -> 'all_reduce'."""
    key = op.lower().replace("_", "").replace("-", "")
    for name in OPS:
        if name.replace("_", "") == key:
            return name
    raise ValueError(f"unknown collective {op!r}; known: {', '.join(OPS)}")


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw for a collective over n ranks (nccl-tests PERFORMANCE.md)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    op = canonical(op)
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def algbw_gbps(nbytes: float, seconds: float) -> float:
    """S / t in GB/s; S is the total size (see the module docstring)."""
    return nbytes / seconds / 1e9


def busbw_gbps(op: str, nbytes: float, seconds: float, n: int) -> float:
    return algbw_gbps(nbytes, seconds) * bus_factor(op, n)


class Row(NamedTuple):
    bytes: int          # S, the size nccl-tests prints
    time_us: float      # one collective, median over trials, mean over ranks
    algbw_GBps: float
    busbw_GBps: float


def size_range(lo: int = 8, hi: int = 1 << 30, factor: int = 2) -> list[int]:
    """8, 16, ..., 1 GiB: the nccl-tests `-b 8 -e 1G -f 2` sweep; `hi` is always the last size."""
    sizes, s = [], lo
    while s < hi:
        sizes.append(s)
        s *= factor
    return sizes + [hi]


def peak_busbw(rows: list[Row]) -> float:
    return max(r.busbw_GBps for r in rows)


# ---- the measurement, run inside each rank ----------------------------------------------------

_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor   # new name in torch 2.13
_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

# Each entry runs one collective on (send, recv); the result is in recv. all_reduce and broadcast
# work in place (recv is send), the others out of place. Tests replace an entry to break it.
RUN = {
    "all_reduce": lambda send, recv: dist.all_reduce(recv),
    "all_gather": lambda send, recv: _gather(recv, send),
    "reduce_scatter": lambda send, recv: _scatter(recv, send),
    "all_to_all": lambda send, recv: dist.all_to_all_single(recv, send),
    "broadcast": lambda send, recv: dist.broadcast(recv, src=0),
}
IN_PLACE = ("all_reduce", "broadcast")


def numels(op: str, nbytes: int, n: int, esize: int) -> tuple[int, int, int]:
    """(send numel, recv numel, S in bytes) for a requested size, rounded to whole elements per rank."""
    total = max(1, nbytes // esize)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        total = max(n, total // n * n)
    send = total // n if op == "all_gather" else total
    recv = total // n if op == "reduce_scatter" else total
    return send, recv, total * esize


def expected(op: str, inputs: list, rank: int):
    """What `rank` must hold after the collective, from every rank's input."""
    n = len(inputs)
    if op == "all_reduce":
        return torch.stack(inputs).sum(0)
    if op == "all_gather":
        return torch.cat(inputs)
    if op == "reduce_scatter":
        return torch.stack(inputs).sum(0).chunk(n)[rank]
    if op == "all_to_all":
        return torch.cat([x.chunk(n)[rank] for x in inputs])
    if op == "broadcast":
        return inputs[0]
    raise ValueError(f"sweep does not run {op!r}")


def _random(numel: int, seed: int, device: str, dtype):
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(numel, generator=g, device=device, dtype=dtype)


def check(op: str, nbytes: int, rank: int, n: int, device: str, dtype, seed: int) -> None:
    """Run `op` once on fresh random inputs and compare with the result computed from all inputs.

    Every rank rebuilds every rank's input from its seed, so no data crosses ranks except through
    the collective under test. The verdict is agreed with an all_reduce, so all ranks fail together.
    """
    n_send, n_recv, _ = numels(op, nbytes, n, torch.empty((), dtype=dtype).element_size())
    inputs = [_random(n_send, seed * 1_000_003 + r, device, dtype) for r in range(n)]
    send = inputs[rank].clone()
    recv = send if op in IN_PLACE else poisoned_empty((n_recv,), dtype, device)
    RUN[op](send, recv)
    want = expected(op, inputs, rank)
    ok = recv.shape == want.shape and torch.allclose(recv, want, rtol=1e-5, atol=1e-5 * n)
    bad = torch.tensor([0.0 if ok else 1.0], device=device)
    dist.all_reduce(bad)
    if bad.item():
        raise AssertionError(f"{op} of {nbytes} B: wrong result on {int(bad.item())} of {n} ranks"
                             + ("" if ok else f" (rank {rank} among them)"))


def iterations(nbytes: int, min_iters: int, max_iters: int, target_bytes: int) -> int:
    """Many iterations for small messages, few for large ones; the same on every rank."""
    return int(min(max_iters, max(min_iters, target_bytes // max(nbytes, 1))))


def time_one(op: str, nbytes: int, rank: int, n: int, device: str, dtype, plan: dict) -> float:
    """Seconds per collective: median over trials of the mean of a batch, then mean over ranks."""
    n_send, n_recv, _ = numels(op, nbytes, n, torch.empty((), dtype=dtype).element_size())
    send = torch.randn(n_send, device=device, dtype=dtype)
    recv = send if op in IN_PLACE else torch.empty(n_recv, device=device, dtype=dtype)
    fn = RUN[op]
    iters = iterations(nbytes, plan["min_iters"], plan["max_iters"], plan["target_bytes"])
    for _ in range(plan["warmup"]):
        fn(send, recv)
    def batch():
        for _ in range(iters):
            fn(send, recv)
    if device.startswith("cuda"):  # CUDA events around the batch, every rank leaving the barrier together
        ms = events_ms(batch, trials=plan["trials"], warmup=0, before=lambda: (dist.barrier(), torch.cuda.synchronize()))
    else:
        ms = host_ms(batch, reps=plan["trials"], warmup=0, before=dist.barrier)
    mean = torch.tensor([ms / 1e3 / iters], dtype=torch.float64, device=device)
    dist.all_reduce(mean)  # nccl-tests' default `-a 1`: the average over ranks
    return mean.item() / n


def _worker(rank: int, world: int, backend: str, port: int, plan: dict, out_path: str) -> None:
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dtype = getattr(torch, plan["dtype"])
    kwargs = {}
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
        kwargs["device_id"] = torch.device(device)
    else:
        torch.set_num_threads(1)
        device = "cpu"
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=timedelta(seconds=plan["timeout_s"]), **kwargs)
    try:
        results = {}
        for i, op in enumerate(plan["ops"]):
            rows = []
            for j, nbytes in enumerate(plan["sizes"]):
                check(op, nbytes, rank, world, device, dtype, seed=plan["seed"] + 1000 * i + j)
                seconds = time_one(op, nbytes, rank, world, device, dtype, plan)
                size = numels(op, nbytes, world, torch.empty((), dtype=dtype).element_size())[2]
                rows.append([size, seconds * 1e6, algbw_gbps(size, seconds),
                             busbw_gbps(op, size, seconds, world)])
            results[op] = rows
        if rank == 0:
            Path(out_path).write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sweep_all(ops: list[str], sizes_bytes: list[int], world: int, backend: str = "gloo", *,
              dtype: str = "float32", warmup: int = 5, trials: int = 5, min_iters: int = 5,
              max_iters: int = 200, target_bytes: int = 1 << 30, seed: int = 0, timeout_s: int = 120,
              start_method: str = "spawn") -> dict[str, list[Row]]:
    """Check, then time, each collective at each size, in one group of `world` processes."""
    ops = [canonical(op) for op in ops]
    for op in ops:
        if op not in RUN:
            raise ValueError(f"sweep does not run {op!r}; it runs {', '.join(RUN)}")
    if backend == "nccl" and torch.cuda.device_count() < world:
        raise RuntimeError(f"NCCL sweep over {world} ranks needs {world} GPUs; "
                           f"this machine has {torch.cuda.device_count()}")
    plan = dict(ops=ops, sizes=list(sizes_bytes), dtype=dtype, warmup=warmup, trials=trials,
                min_iters=min_iters, max_iters=max_iters, target_bytes=target_bytes, seed=seed,
                timeout_s=timeout_s)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        mp.start_processes(_worker, args=(world, backend, _free_port(), plan, str(out)), nprocs=world,
                           join=True, start_method=start_method)
        data = json.loads(out.read_text())
    return {op: [Row(int(r[0]), *r[1:]) for r in data[op]] for op in ops}


def sweep(op: str, sizes_bytes: list[int], world: int, backend: str = "gloo", **kwargs) -> list[Row]:
    """Rows (bytes, time_us, algbw_GBps, busbw_GBps) of one collective; see `sweep_all`."""
    return sweep_all([op], sizes_bytes, world, backend, **kwargs)[canonical(op)]


def _human(nbytes: float, _pos=None) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024:
            return f"{nbytes:g} {unit}"
        nbytes /= 1024
    return f"{nbytes:g} PiB"


def plot(results: dict[str, list[Row]], nominal_GBps: float | None = None,
         nominal_label: str = "nominal link rate", title: str | None = None):
    """Log-log busbw against S for each collective, with a dashed line at the nominal rate."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for op, rows in results.items():
        ax.plot([r.bytes for r in rows], [r.busbw_GBps for r in rows], marker="o", ms=3, label=op)
    if nominal_GBps:
        ax.axhline(nominal_GBps, ls="--", color="gray", label=f"{nominal_label}: {nominal_GBps:g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = [r.bytes for rows in results.values() for r in rows] or [1, 1 << 30]
    lo, hi = min(sizes).bit_length() - 1, max(sizes).bit_length()
    ax.xaxis.set_major_locator(FixedLocator([2.0 ** k for k in range(lo, hi + 1) if k % 5 == 0]))
    ax.xaxis.set_major_formatter(FuncFormatter(_human))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("message size S")
    ax.set_ylabel("busbw (GB/s)")
    if title:
        ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    plt.close(fig)
    return fig
