"""evaluate(task, source) -> Report: static checks, sandboxed trials on secret inputs, timing, re-check.

fast_p (KernelBench): the fraction of tasks whose kernel is correct and more than p times faster than
the eager baseline; fast_0 is the fraction correct.
"""
from __future__ import annotations

import os
import random
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from snippets.kernel_agent import checks, timing
from snippets.kernel_agent.sandbox import Limits, SandboxError, Worker
from snippets.kernel_agent.spec import DISTRIBUTIONS, Task
from snippets.kernel_agent.static import check_source

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SUSPICIOUS_SPEEDUP = 10.0  # KernelBench's excessive_speedup_threshold: check such a kernel by hand


@dataclass(frozen=True)
class Settings:
    mode: str = "smoke"
    shapes: int = 3  # secret shapes, stratified from small to large
    trials_per_shape: int = 2  # fresh inputs each: a cache keyed on shape returns the first answer
    timing_sets: int = 2  # input sets rotated through the same buffers while timing, all re-checked
    warmup: int = 1
    runs: int = 3
    limits: Limits = Limits()

    @classmethod
    def for_device(cls, device: str = DEVICE, **kw) -> "Settings":
        if device.startswith("cuda"):
            kw = {"mode": "full", "shapes": 4, "timing_sets": 3, "warmup": 5, "runs": 30, **kw}
        return cls(**kw)


@dataclass
class Report:
    task: str
    name: str
    verdict: str = "rejected"  # accepted | rejected | crashed | timeout | out of memory | skipped
    reason: str = ""
    details: list[str] = field(default_factory=list)
    failing_shape: dict | None = None
    max_error: float | None = None
    candidate_ms: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = None
    timing: str = ""
    resources: dict = field(default_factory=dict)
    profile: dict = field(default_factory=dict)  # ncu metrics per kernel at the timing shape (the loop adds them)
    profile_note: str = ""  # why there are none, when there are none
    trials: int = 0
    seconds: float = 0.0
    suspicious: bool = False

    @property
    def correct(self) -> bool:
        return self.verdict == "accepted"

    def summary(self) -> str:
        """What a proposer reads back: the verdict, the failing shape, the timings, the resources."""
        lines = [f"{self.name} on {self.task}: {self.verdict}" + (f": {self.reason}" if self.reason else "")]
        if self.failing_shape:
            lines.append(f"failing shape: {self.failing_shape}")
        if self.speedup is not None:
            lines.append(f"candidate {self.candidate_ms:.4g} ms, eager baseline {self.baseline_ms:.4g} ms, "
                         f"speedup {self.speedup:.3g}x ({self.timing})")
        if self.resources:
            lines.append(f"compiled kernels: {self.resources}")
        for kernel, metrics in self.profile.items():
            lines.append(f"ncu, {kernel}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
        if self.profile_note:
            lines.append(self.profile_note)
        return "\n".join(lines)


class _Failed(Exception):
    def __init__(self, reason: str, verdict: str = "rejected", shape: dict | None = None, err: float | None = None):
        super().__init__(reason)
        self.reason, self.verdict, self.shape, self.err = reason, verdict, shape, err


# --8<-- [start:evaluate]
def evaluate(task: Task, source: str, name: str = "candidate", settings: Settings | None = None,
             seed: int | None = None, static: bool = True) -> Report:
    """Judge one candidate. `seed` only for reproducing a failure: by default it is secret and new."""
    s, start = settings or Settings.for_device(), time.perf_counter()
    rep = Report(task.name, name)
    problems = check_source(source, task) if static else []
    if problems:
        rep.reason, rep.details = problems[0], problems
    elif "load_inline" in source and DEVICE != "cuda":
        rep.verdict, rep.reason = "skipped", "skipped: needs CUDA (load_inline builds a CUDA extension)"
    else:
        rng = random.Random(secrets.randbits(64) if seed is None else seed)
        gen = torch.Generator().manual_seed(rng.getrandbits(63))
        try:
            with Worker(DEVICE, s.limits) as worker:
                _trials(task, source, s, worker, rng, gen, rep)
            rep.verdict = "accepted"
        except _Failed as f:
            rep.verdict, rep.reason, rep.failing_shape, rep.max_error = f.verdict, f.reason, f.shape, f.err
        except SandboxError as e:
            rep.verdict, rep.reason = e.verdict, e.reason
        rep.details = rep.details or ([rep.reason] if rep.reason else [])
    rep.seconds = time.perf_counter() - start
    return rep
# --8<-- [end:evaluate]


def _trials(task, source, s, worker, rng, gen, rep) -> None:
    def draw(shape):
        return task.make_inputs(shape, gen, rng.choice(DISTRIBUTIONS))

    def reference(inputs):
        return task.reference(*(t.to(DEVICE, torch.float64) for t in inputs)).cpu()

    def ask(cmd, timeout, shape=None, **args):
        reply = worker.request(cmd, timeout, **args)
        if "error" in reply:
            verdict = checks.classify_error(reply["error"])
            what = verdict if verdict != "rejected" else checks.RAISED
            raise _Failed(f"{what} during '{cmd}' ({reply['error']})", verdict, shape)
        return reply

    bench = [draw(task.bench[s.mode]) for _ in range(s.timing_sets)]  # drawn now, revealed only when timing
    base = ask("baseline", s.limits.load_s, task_name=task.name, sets=bench, warmup=s.warmup, runs=s.runs)
    ask("load", s.limits.load_s, source=source, entry=task.entry)
    plan = [task.example] + [x for x in task.draw_shapes(rng, s.mode, s.shapes) for _ in range(s.trials_per_shape)]
    earlier = []
    for i, shape in enumerate(plan):
        inputs = draw(shape)
        r = ask("run", s.limits.call_s, shape, inputs=list(inputs), names=list(task.arrays(shape)),
                out_shape=task.out_shape(shape), dtype=task.dtype, join_s=s.limits.call_s)
        rep.trials += 1
        problem, err = r["flags"][0] if r["flags"] else None, None
        if problem is None:
            problem, err = checks.compare(r["out"], reference(inputs), task.atol, task.rtol, earlier)
            if problem and i > 0 and not problem.startswith(checks.CACHED):  # the example passed
                problem = f"{checks.SPECIAL_CASED}: correct on the example {task.example}, not on {shape}: {problem}"
        if problem:
            raise _Failed(problem, shape=shape, err=err)
        earlier.append(r["out"])
    timed = ask("time", s.limits.call_s * (s.warmup + s.runs), task.bench[s.mode], sets=bench,
                out_shape=task.out_shape(task.bench[s.mode]), dtype=task.dtype, warmup=s.warmup, runs=s.runs)
    for k, out in timed["outs"]:  # outputs of the last timed runs, on the inputs drawn for timing
        problem, err = checks.compare(out, reference(bench[k]), task.atol, task.rtol)
        if problem:
            raise _Failed(f"{checks.TIMING_PHASE} (re-check on the timing inputs: {problem})",
                          shape=task.bench[s.mode], err=err)
    rep.resources = ask("resources", 30)["resources"]
    rep.candidate_ms, rep.baseline_ms = timing.median(timed["times"]), timing.median(base["times"])
    rep.speedup = rep.baseline_ms / rep.candidate_ms
    rep.timing = timing.CUDA_NOTE if DEVICE == "cuda" else timing.CPU_NOTE
    rep.suspicious = DEVICE == "cuda" and rep.speedup > SUSPICIOUS_SPEEDUP


def evaluate_many(jobs: list[tuple[Task, str, str]], workers: int | None = None, **kw) -> list[Report]:
    """evaluate() over (task, name, source) jobs. On CUDA one at a time: candidates timed side by side
    on one GPU would slow each other down."""
    workers = workers or (1 if DEVICE == "cuda" else os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda j: evaluate(j[0], j[2], name=j[1], **kw), jobs))


def fast_p(reports: list[Report], p: float) -> float:
    """Fraction of tasks (one report each) whose kernel is correct and more than p times faster."""
    if not reports:
        return 0.0
    return sum(r.correct and r.speedup is not None and r.speedup > p for r in reports) / len(reports)
