"""Synthetic Flight Recorder dumps for any number of ranks, in the format PyTorch writes on NCCL.

The field set, order and types copy a real dump of torch 2.11 + NCCL 2.28.9 on two H200s (the
probe's fr.0, read back as JSON): a completed entry has `duration_ms` (TORCH_NCCL_ENABLE_TIMING=1)
and both `time_discovered_*_ns`; an entry still running when the watchdog fired is `started`, has
no `duration_ms`, `time_discovered_completed_ns` null and `retired` false.

What each kind leaves behind (collectives 1 .. seq-1 completed everywhere, the same program on all ranks):

- `missing`: the culprit never issues collective `seq` (a rank-dependent branch skipped it). Its
  dump ends at seq-1; every other rank has `seq` in state `started`, waiting for it.
- `straggler`: every rank completes `seq`, but the culprit issues it seconds late: its
  `time_created_ns` is later, and the other ranks' `duration_ms` of `seq` is about the delay
  (they sat in the kernel waiting), while the culprit's is short.
- `mismatch`: every rank issues `seq`, the culprit with twice the elements; all are `started`.

The dumps hold what a real job's would: nothing says which rank is the culprit.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

KINDS = ("missing", "straggler", "mismatch")
T0_NS = 1_796_006_868_139_937_988       # the probe's first time_created_ns
STEP_NS = 50_000_000                    # 50 ms between collectives
TORCH = "/opt/torch/.venv/lib/python3.12/site-packages/torch/distributed"
C10D_LINE = {"all_reduce": 3068, "all_gather_into_tensor": 4261, "reduce_scatter_tensor": 4772, "broadcast": 2849}
OPS = (("all_reduce", 0.7), ("all_gather", 0.1), ("reduce_scatter", 0.1), ("broadcast", 0.1))


def _program(n: int, world: int, rng: random.Random) -> list[tuple[str, list, list, int]]:
    """The op, input sizes, output sizes and train.py line of collectives 1..n (same on every rank)."""
    names, weights = zip(*OPS)
    prog = []
    for _ in range(n):
        op = rng.choices(names, weights)[0]
        count = 1 << rng.randrange(10, 24)
        if op == "all_gather":
            prog.append((op, [[count]], [[world, count]], 57))
        elif op == "reduce_scatter":
            prog.append((op, [[world * count]], [[count]], 61))
        else:
            prog.append((op, [[count]], [[count]], 52 if op == "all_reduce" else 66))
    return prog


def _frames(op: str, line: int) -> str:
    """The Python stack of a collective, already as JSON: the same for every rank, so encode it once."""
    api = {"all_gather": "all_gather_into_tensor", "reduce_scatter": "reduce_scatter_tensor"}.get(op, op)
    return json.dumps([{"name": api, "filename": f"{TORCH}/distributed_c10d.py", "line": C10D_LINE[api]},
            {"name": "wrapper", "filename": f"{TORCH}/c10d_logger.py", "line": 83},
            {"name": "train_step", "filename": "/job/train.py", "line": line},
            {"name": "main", "filename": "/job/train.py", "line": 120},
            {"name": "<module>", "filename": "/job/train.py", "line": 131}])


def _entry(seq: int, op: str, inputs: list, outputs: list, frames: str, created: int, state: str,
           duration_ms: float | None, tid: str, timeout_ms: int) -> str:
    """One entry as JSON text, keys in the order of the real dump (frames first)."""
    e = {"record_id": seq - 1, "pg_id": 0, "process_group": ["0", "default_pg"],
         "thread_name": "python3", "thread_id": tid, "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
         "profiling_name": f"nccl:{op}", "time_created_ns": created}
    if state == "completed":
        e["duration_ms"] = duration_ms
    started = created + int((duration_ms or 0.05) * 1e6) + 40_000
    e.update(input_sizes=inputs, input_dtypes=["Float"], output_sizes=outputs, output_dtypes=["Float"],
             state=state, time_discovered_started_ns=started,
             time_discovered_completed_ns=started + 1_500 if state == "completed" else None,
             retired=state == "completed", timeout_ms=timeout_ms, is_p2p=False)
    return '{"frames": ' + frames + ", " + json.dumps(e)[1:]


def make_job(dirpath, world: int, culprit: int, kind: str, seq: int, seed: int = 0, *,
             entries: int = 20, timeout_ms: int = 600_000) -> Path:
    """Write fr.<R>.json for ranks 0..world-1 into dirpath; keep the last `entries` collectives per rank."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not 0 <= culprit < world or seq < 1:
        raise ValueError(f"need 0 <= culprit < world and seq >= 1 (culprit={culprit}, world={world}, seq={seq})")
    out = Path(dirpath)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    prog = _program(seq, world, rng)
    delay_ms = rng.uniform(2_000, 4_000)
    frames = {(op, line): _frames(op, line) for op, _, _, line in prog}
    pg_config = json.dumps({"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}})
    for rank in range(world):
        r = random.Random(seed * 1_000_003 + rank)
        tid = str(139_800_000_000_000 + r.randrange(10**9))
        last = seq - 1 if (kind == "missing" and rank == culprit) else seq
        recs, done = [], last
        for s in range(max(1, last - entries + 1), last + 1):
            op, inputs, outputs, line = prog[s - 1]
            created = T0_NS + s * STEP_NS + r.randrange(200_000)
            state, duration = "completed", r.uniform(0.01, 0.3)
            if s == seq:
                if kind == "missing":
                    state = "started"
                elif kind == "mismatch":
                    state = "started"
                    if rank == culprit:
                        inputs = [[2 * d for d in inputs[0]]]
                        outputs = [outputs[0][:-1] + [2 * outputs[0][-1]]]
                elif rank == culprit:                      # straggler, late but quick
                    created += int(delay_ms * 1e6)
                else:                                      # straggler's peers wait in the kernel
                    duration = delay_ms + r.uniform(0.01, 0.3)
            recs.append(_entry(s, op, inputs, outputs, frames[op, line], created, state, duration, tid,
                               timeout_ms))
            done = s if state == "completed" else s - 1
        status = {"0": {"last_enqueued_collective": last, "last_started_collective": last,
                        "last_completed_collective": done}}
        (out / f"fr.{rank}.json").write_text(
            f'{{"version": "2.10", "pg_config": {pg_config}, "comm_lib_version": "2.28.9", '
            f'"pg_status": {json.dumps(status)}, "entries": [{", ".join(recs)}]}}')
    return out
