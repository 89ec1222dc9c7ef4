"""Fault scenarios: small torch.distributed programs that hang, crash or slow down on purpose.

One process per rank runs `python -m snippets.nccl.scenarios NAME --backend gloo|nccl --timeout S`
with the usual torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT);
`snippets.nccl.launch` starts them and collects the evidence. Every rank first runs WARMUP good
all_reduces, so the collective that goes wrong has sequence number WARMUP + 1 or later, as in a
real job. Every rank prints one JSON line per collective it enters (op, seq, time): that is the
kind of log line a user adds, and the doctor does not read it.

A rank whose collective fails prints the exception, writes its Flight Recorder dump and exits
with code 1, as a training script's crash handler would. On gloo nothing else writes that dump;
on NCCL the watchdog already has (`fr.<R>`, pickle) when TORCH_NCCL_DUMP_ON_TIMEOUT=1. A rank that
ends normally writes an on-demand dump (`fr.<R>.json`) unless the watchdog wrote one.

SCENARIOS maps each name to its program and to what the doctor should find. That answer is for
the tests and the notebook; the doctor never reads it.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

WARMUP = 3  # good collectives before the fault
CULPRIT = 1  # the rank that misbehaves in every scenario


def event(**fields) -> None:
    print(json.dumps({"t": round(time.time(), 3), **fields}), flush=True)


class Rank:
    """What a scenario sees: its rank, the collectives it may call, and a way to wait."""

    def __init__(self, rank: int, world: int, backend: str, timeout: float, local_rank: int):
        self.rank, self.world, self.backend, self.timeout = rank, world, backend, timeout
        self.device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
        self.seq = 0

    def tensor(self, n: int) -> torch.Tensor:
        return torch.full((n,), float(self.rank + 1), device=self.device)

    def _enter(self, op: str, t: torch.Tensor) -> None:
        self.seq += 1
        event(rank=self.rank, op=op, seq=self.seq, shape=list(t.shape))

    def all_reduce(self, t: torch.Tensor) -> None:
        self._enter("all_reduce", t)
        dist.all_reduce(t)

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        self._enter("all_gather", t)
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t)
        return out

    def idle(self, seconds: float, why: str) -> None:
        event(rank=self.rank, idle_s=round(seconds, 2), why=why)
        time.sleep(seconds)


# --8<-- [start:scenarios]
def healthy(r: Rank) -> None:
    for _ in range(3):
        r.all_reduce(r.tensor(1024))


def skip_collective(r: Rank) -> None:
    metrics = r.tensor(4)
    if r.rank != CULPRIT:  # rank-dependent branch: say, rank 1 had an empty evaluation shard
        r.all_reduce(metrics)
    r.idle(1.5 * r.timeout, "work that needs no peer, longer than the timeout")


def straggler(r: Rank) -> None:
    grads = r.tensor(1024)
    if r.rank == CULPRIT:
        r.idle(0.6 * r.timeout, "slow data loading: late, but inside the timeout")
    r.all_reduce(grads)
    r.all_reduce(grads)


def shape_mismatch(r: Rank) -> None:
    n = 2048 if r.rank == CULPRIT else 1024  # e.g. a batch padded to the local longest sequence
    r.all_reduce(r.tensor(n))


def order_mismatch(r: Rank) -> None:
    x = r.tensor(1024)
    if r.rank == CULPRIT:
        r.all_gather(x)
    else:
        r.all_reduce(x)


def dead_rank(r: Rank) -> None:
    if r.rank == CULPRIT:
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does: no traceback, no dump
    r.all_reduce(r.tensor(1024))


# --8<-- [end:scenarios]
def uneven_microbatches(r: Rank) -> None:
    n_micro = 2 if r.rank == CULPRIT else 3  # len(shard) // micro_batch differs on the last shard
    for _ in range(n_micro):
        r.all_reduce(r.tensor(1024))  # gradient sync per micro-batch
    # rank 1 has finished its epoch and leaves while the others wait for it


def swallowed_exception(r: Rank) -> None:
    for step in range(3):
        try:
            if r.rank == CULPRIT and step == 1:
                raise ValueError(f"corrupt sample in batch {step}")
            r.all_reduce(r.tensor(1024))
        except ValueError as e:  # the bug: this rank skips the step, the others still reduce
            print(f"warning: skipping step {step}: {e!r}", flush=True)
    r.idle(1.5 * r.timeout, "saving a checkpoint")


@dataclass(frozen=True)
class Expected:
    cls: str  # missing_rank | straggler | mismatch | dead_rank | network_error | none
    culprits: tuple[int, ...]
    op: str | None
    seq: int | None


@dataclass(frozen=True)
class Scenario:
    fn: Callable[[Rank], None]
    expected: Expected
    what: str
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # backend -> extra environment
    backends: tuple[str, ...] = ("gloo", "nccl")


_S = WARMUP + 1
SCENARIOS: dict[str, Scenario] = {
    "healthy": Scenario(healthy, Expected("none", (), None, None), "no fault: the control"),
    "skip_collective": Scenario(skip_collective, Expected("missing_rank", (CULPRIT,), "all_reduce", _S),
                                "rank 1 skips an all_reduce in a rank-dependent branch"),
    "straggler": Scenario(straggler, Expected("straggler", (CULPRIT,), "all_reduce", _S),
                          "rank 1 reaches an all_reduce 0.6 x timeout late; nothing times out"),
    "shape_mismatch": Scenario(shape_mismatch, Expected("mismatch", (CULPRIT,), "all_reduce", _S),
                               "rank 1 all_reduces 2048 elements, the others 1024",
                               env={"gloo": {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}}),
    "shape_mismatch_abort": Scenario(shape_mismatch, Expected("mismatch", (), "all_reduce", _S),
                                     "the same without DETAIL: gloo aborts a process (SIGABRT)",
                                     backends=("gloo",)),
    "order_mismatch": Scenario(order_mismatch, Expected("mismatch", (CULPRIT,), "all_reduce", _S),
                               "rank 1 calls all_gather where the others call all_reduce"),
    "dead_rank": Scenario(dead_rank, Expected("dead_rank", (CULPRIT,), "all_reduce", _S),
                          "rank 1 is killed (SIGKILL) before an all_reduce"),
    "uneven_microbatches": Scenario(uneven_microbatches, Expected("missing_rank", (CULPRIT,), "all_reduce", WARMUP + 3),
                                    "rank 1 has 2 micro-batches, the others 3; rank 1 then exits"),
    "swallowed_exception": Scenario(swallowed_exception, Expected("missing_rank", (CULPRIT,), "all_reduce", WARMUP + 3),
                                    "rank 1 catches an exception and skips one step's all_reduce"),
}


def dump_flight_recorder(rank: int, backend: str) -> str | None:
    """Write this rank's Flight Recorder buffer as JSON to $TORCH_FR_DUMP_TEMP_FILE<rank>.json.

    The pickle API is used and re-encoded as JSON (tuples become lists) because only it can carry
    the Python stack of each collective. Stacks are kept on NCCL only: on torch 2.13 the first dump
    with stacks imports torch._inductor, about 2 s per process, too slow for the CPU tests.
    Nothing is written where the NCCL watchdog already wrote `<prefix><rank>`.
    """
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix or os.path.exists(f"{prefix}{rank}"):
        return None
    c10d = torch._C._distributed_c10d
    dump = getattr(c10d, "_dump_nccl_trace", None) if backend == "nccl" else None
    dump = dump or c10d._dump_fr_trace
    trace = pickle.loads(dump(True, backend == "nccl", False))  # collectives, stacks, only active
    path = f"{prefix}{rank}.json"
    with open(path, "w") as f:
        json.dump(trace, f, default=str)
    return path


def init(backend: str, timeout: float) -> Rank:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    kwargs = {}
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        kwargs["device_id"] = torch.device("cuda", local_rank)
    else:
        torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout), **kwargs)
    return Rank(rank, world, backend, timeout, local_rank)


def finish(r: Rank) -> None:
    if r.backend == "nccl":
        torch.cuda.synchronize()  # a rank whose collective hangs stays here until its watchdog aborts it
        r.idle(r.timeout + 4, "stay reachable: a peer's watchdog may ask this rank to dump")
    dump_flight_recorder(r.rank, r.backend)
    event(rank=r.rank, done=True)
    if r.backend == "nccl":
        os._exit(0)  # a peer may be gone already, and destroy_process_group could wait on it
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("scenario", choices=sorted(SCENARIOS))
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--timeout", type=float, default=5.0, help="process group timeout, seconds")
    args = p.parse_args(argv)
    r = init(args.backend, args.timeout)
    for _ in range(WARMUP):
        r.all_reduce(r.tensor(1024))
    try:
        SCENARIOS[args.scenario].fn(r)
    except Exception:  # the crash handler of a training script: report, dump, exit non-zero
        traceback.print_exc()
        sys.stderr.flush()
        dump_flight_recorder(r.rank, r.backend)
        os._exit(1)
    finish(r)


if __name__ == "__main__":
    main()
