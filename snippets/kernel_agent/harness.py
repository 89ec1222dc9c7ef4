"""evaluate(task, source) -> Report. The candidate runs in a sandbox of its own; the verdict is decided here.

fast_p (KernelBench): the fraction of tasks whose kernel is correct and more than p times faster than
the eager baseline; fast_0 is the fraction correct.
"""
from __future__ import annotations

import math
import os
import random
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from snippets.kernel_agent import checks, rules, timing
from snippets.kernel_agent.sandbox import IsolationUnavailable, Limits, SandboxError, Worker
from snippets.kernel_agent.spec import DISTRIBUTIONS, Task
from snippets.kernel_agent.static import check_source
from snippets.kernel_agent.worker import digest, make_inputs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
MAX_SOURCE = 256 << 10  # bytes of candidate source; every scan of it is linear, and this bounds them too


@dataclass(frozen=True)
class Settings:
    mode: str = "smoke"
    shapes: int = 3  # secret shapes, stratified from small to large
    trials_per_shape: int = 2  # fresh inputs each: a cache keyed on shape returns the first answer
    calls: int = 4  # timed calls, each on inputs of its own, every one checked
    warmup: int = 1
    limits: Limits = Limits()
    trusted: bool = False  # run without the OS sandbox: only for code you wrote

    @classmethod
    def for_device(cls, device: str = DEVICE, **kw) -> "Settings":
        if device.startswith("cuda"):
            kw = {"mode": "full", "shapes": 2, "trials_per_shape": 1, "calls": 8, "warmup": 2, **kw}
        return cls(**kw)


@dataclass
class Report:
    task: str
    name: str
    verdict: str = "rejected"  # accepted | rejected | crashed | timeout | out of memory | skipped
    reason: str = ""
    details: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the static check's findings: advisory
    failing_shape: dict | None = None
    max_error: float | None = None
    candidate_ms: float | None = None
    baseline_ms: float | None = None
    speedup: float | None = None
    timing: str = ""
    profile: dict = field(default_factory=dict)  # ncu metrics per kernel at the timing shape (the loop adds them)
    profile_note: str = ""  # why there are none, when there are none
    kernels: list[str] = field(default_factory=list)  # what the profiler saw run during the timed calls
    trials: int = 0
    seconds: float = 0.0

    @property
    def correct(self) -> bool:
        return self.verdict == "accepted"

    def summary(self) -> str:
        """What a proposer reads back: the verdict, the failing shape, the timings, what ran."""
        lines = [f"{self.name} on {self.task}: {self.verdict}" + (f": {self.reason}" if self.reason else "")]
        if self.failing_shape:
            lines.append(f"failing shape: {self.failing_shape}")
        if self.speedup is not None:
            lines.append(f"candidate {self.candidate_ms:.4g} ms, eager baseline {self.baseline_ms:.4g} ms, "
                         f"speedup {self.speedup:.3g}x ({self.timing})")
        if self.kernels:
            lines.append("ran: " + ", ".join(self.kernels[:6]))
        lines += [f"static check (advisory): {w}" for w in self.warnings]
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
             seed: int | None = None) -> Report:
    """Judge one candidate. `seed` only for reproducing a failure: by default it is secret and new."""
    s, start = settings or Settings.for_device(), time.perf_counter()
    if len(source.encode("utf-8", "surrogatepass")) > MAX_SOURCE:
        rep = Report(task.name, name, reason=f"source too large (over {MAX_SOURCE} bytes)")
        rep.details, rep.seconds = [rep.reason], time.perf_counter() - start
        return rep
    rep = Report(task.name, name, warnings=check_source(source, task))
    if "load_inline" in source and DEVICE != "cuda":
        rep.verdict, rep.reason = "skipped", "skipped: needs CUDA (load_inline builds a CUDA extension)"
    else:
        rng = random.Random(secrets.randbits(64) if seed is None else seed)
        try:
            base = baseline(task, s)  # the eager baseline, timed in a sandbox no candidate has touched
            with Worker(DEVICE, s.limits, s.trusted) as worker:
                _trials(task, source, s, worker, rng, rep)
                _timed(task, source, s, worker, rng, rep, base)
            rep.verdict = "accepted"
        except _Failed as f:
            rep.verdict, rep.reason, rep.failing_shape, rep.max_error = f.verdict, f.reason, f.shape, f.err
        except SandboxError as e:
            rep.verdict, rep.reason = e.verdict, e.reason
        except IsolationUnavailable:  # the caller's to report: this machine runs no untrusted code
            raise
        except Exception as e:  # a fault of the harness itself: no verdict on the candidate, and no traceback
            rep.verdict = "error"
            rep.reason = f"could not evaluate: the harness failed ({type(e).__name__}: {str(e)[:200]})"
        rep.details = [rep.reason] if rep.reason else []
    rep.seconds = time.perf_counter() - start
    return rep
# --8<-- [end:evaluate]


def _ask(worker: Worker, cmd: str, timeout: float, shape=None, **args) -> dict:
    reply = worker.request(cmd, timeout, **args)
    if "error" in reply:
        verdict = checks.classify_error(str(reply["error"]))
        what = verdict if verdict != "rejected" else checks.RAISED
        raise _Failed(f"{what} during '{cmd}' ({str(reply['error'])[:500]})", verdict, shape)
    return reply


def _expect(reply: dict, key: str, kind, cmd: str):
    value = reply.get(key)
    if not isinstance(value, kind):
        raise _Failed(f"{checks.FORGED_REPLY} ('{cmd}' replied {key} as {type(value).__name__})")
    return value


def _tensor(value, shape, dtype, what: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(shape) or value.dtype != dtype:
        got = f"{tuple(value.shape)} {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
        raise _Failed(f"{checks.WRONG} ({what}: {got}, expected {tuple(shape)} {dtype})")
    return value


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _judge_rules(profile, source, launches, measured_ms=None, calls=1, shape=None) -> None:
    if not isinstance(profile, dict) or not all(isinstance(k, str) and isinstance(v, list) and len(v) == 2
                                                and all(map(_number, v)) for k, v in profile.items()):
        raise _Failed(f"{checks.FORGED_REPLY} (the profile is not the launcher's)")
    if launches is not None and not (isinstance(launches, dict) and all(
            isinstance(k, str) and _number(n) for k, n in launches.items())):
        raise _Failed(f"{checks.FORGED_REPLY} (the launch counts are not the launcher's)")
    problem = rules.judge(profile, source, DEVICE, launches or {}, measured_ms, calls)
    if problem:
        raise _Failed(problem, shape=shape)


def _trials(task, source, s, worker, rng, rep) -> None:
    _ask(worker, "load", s.limits.load_s, source=source, entry=task.entry)
    plan = [task.example] + [x for x in task.draw_shapes(rng, s.mode, s.shapes) for _ in range(s.trials_per_shape)]
    earlier, turn = [], rng.randrange(len(DISTRIBUTIONS))
    for i, shape in enumerate(plan):  # the distributions take turns: every one is tried at least once
        specs, seed = task.specs(shape, DISTRIBUTIONS[(turn + i) % len(DISTRIBUTIONS)]), rng.getrandbits(62)
        r = _ask(worker, "run", s.limits.call_s, shape, specs=specs, seed=seed, out_shape=task.out_shape(shape),
                 out_dtype=str(task.dtype).removeprefix("torch."), join_s=s.limits.call_s / 4)
        rep.trials += 1
        inputs = make_inputs(specs, seed, DEVICE)
        out = _tensor(r.get("out"), task.out_shape(shape), task.dtype, "output").to(DEVICE)
        returned = _expect(r, "inputs", list, "run")
        if len(returned) != len(specs):
            raise _Failed(f"{checks.FORGED_REPLY} ('run' returned {len(returned)} inputs for {len(specs)})")
        for (name, *_), mine, theirs in zip(specs, inputs, returned):
            if not isinstance(theirs, torch.Tensor) or not checks.same(mine, theirs.to(DEVICE)):
                raise _Failed(f"{checks.INPUT_MUTATED} ({name} changed during the call)", shape=shape)
        if r.get("late") is not False:
            raise _Failed(f"{checks.LATE_WRITE} (work left running on another stream or thread after the call "
                          "returned)", shape=shape)
        problem, err = checks.compare(out, task.reference_of(inputs), task.atol, task.rtol, earlier)
        if problem and i > 0 and problem.startswith((checks.WRONG, checks.PARTIAL)):  # the example passed
            problem = f"{checks.SPECIAL_CASED}: correct on the example {task.example}, not on {shape}: {problem}"
        if problem:
            raise _Failed(problem, shape=shape, err=err)
        _judge_rules(r.get("profile"), source, r.get("launches"), shape=shape)
        if r.get("outside") is not False:
            raise _Failed(f"{rules.HOST_WORK} (the output was written outside its kernels)", shape=shape)
        earlier.append(out)


def _timed_calls(task, s, worker, rng, timeout) -> tuple[dict, float, list, list, int, list]:
    """Time s.calls calls on inputs of their own; the harness's clock brackets the whole request. Also
    returns the untimed warm-up calls' (specs, seed), against which a wrong timed answer is checked."""
    shape = task.bench[s.mode]
    specs = [task.specs(shape, rng.choice(DISTRIBUTIONS))]
    seeds = [rng.getrandbits(62) for _ in range(s.calls)]
    key, out = rng.getrandbits(62), dict(out_shape=task.out_shape(shape), out_dtype=str(task.dtype)[6:])
    warm = [rng.getrandbits(62) for _ in range(s.warmup)]
    _ask(worker, "warm", timeout, shape, specs=specs[0], seeds=warm, calls=s.calls, **out)
    _ask(worker, "profile_start", timeout)  # the baseline too: the profiler's cost is the same on both sides
    t0 = time.perf_counter()
    r = _ask(worker, "time", timeout, shape, specs=specs[0], seeds=seeds, key=key, **out)
    wall_ms = (time.perf_counter() - t0) * 1e3
    r = {**r, **_ask(worker, "profile_stop", timeout)}
    times = _expect(r, "times", list, "time")
    if len(times) != s.calls or not all(isinstance(t, float) and math.isfinite(t) and t > 0 for t in times):
        raise _Failed(f"{checks.FORGED_REPLY} ('time' replied {len(times)} times for {s.calls} calls)")
    return r, wall_ms, times, [(specs[0], sd) for sd in seeds], key, [(specs[0], sd) for sd in warm]


_BASELINES: dict = {}


def _baseline(task: Task, s: Settings) -> timing.Baseline:
    runs = []
    with Worker(DEVICE, s.limits, s.trusted) as worker:  # a sandbox of its own: no candidate has been here
        _ask(worker, "load", s.limits.load_s, source=task.baseline_source(), entry="kernel", returns=True)
        rng = random.Random(0)
        for _ in range(timing.REPEATS):
            r, wall, times, *_ = _timed_calls(task, s, worker, rng, s.limits.call_s * (s.calls + s.warmup))
            runs.append(timing.Measured(times, wall))
    return timing.Baseline(runs)


def baseline(task: Task, s: Settings) -> timing.Baseline:
    """Measured once per task and settings in this process."""
    key = (task.name, s)
    if key not in _BASELINES:
        _BASELINES[key] = _baseline(task, s)
    return _BASELINES[key]


def _answers_a_warm_up(out: torch.Tensor, task: Task, warm: list) -> bool:
    """The output is right for the inputs of one of the untimed warm-up calls: a cache that served it."""
    return any(checks.compare(out, task.reference_of(make_inputs(specs, seed, DEVICE)), task.atol, task.rtol)[0]
               is None for specs, seed in warm)


def _timed(task, source, s, worker, rng, rep, base: timing.Baseline) -> None:
    shape = task.bench[s.mode]
    r, wall, times, sets, key, warm = _timed_calls(task, s, worker, rng, s.limits.call_s * (s.calls + s.warmup))
    digests = _expect(r, "digests", list, "time")
    if len(digests) != s.calls or not all(isinstance(d, int) and not isinstance(d, bool) for d in digests):
        raise _Failed(f"{checks.FORGED_REPLY} ('time' committed {len(digests)} outputs for {s.calls} calls)")
    forged = timing.unexplained(timing.Measured(times, wall), base, DEVICE)
    if forged:
        raise _Failed(f"{checks.FORGED_TIME} ({forged})", shape=shape)
    fetched = []
    for i, (specs, seed) in enumerate(sets):  # every timed call is checked
        outs = _expect(_ask(worker, "fetch", s.limits.call_s * 4, indices=[i]), "outs", list, "fetch")
        if len(outs) != 1:
            raise _Failed(f"{checks.FORGED_REPLY} ('fetch' returned {len(outs)} outputs for one)")
        out = _tensor(outs[0], task.out_shape(shape), task.dtype, "timed output").to(DEVICE)
        if digest(out, key) != digests[i]:
            raise _Failed(f"{checks.FORGED_REPLY} (timed call {i}: the output fetched is not the one committed "
                          "to before the clock stopped)", shape=shape)
        inputs = make_inputs(specs, seed, DEVICE)
        problem, err = checks.compare(out, task.reference_of(inputs), task.atol, task.rtol, fetched)
        if problem and _answers_a_warm_up(out, task, warm):
            problem = f"{checks.CACHED} (the answer to an untimed warm-up call's inputs, not to its own)"
        if problem:
            raise _Failed(f"{checks.TIMING_PHASE} (timed call {i}: {problem})", shape=shape, err=err)
        fetched.append(out)
    _judge_rules(r.get("profile"), source, r.get("launches"), timing.median(times), s.calls, shape)
    rep.kernels = sorted(k.split("\t", 1)[1] for k in r["profile"] if k.startswith("CUDA\t"))
    rep.candidate_ms, rep.baseline_ms = timing.median(times), timing.median(base.times)
    rep.speedup = rep.baseline_ms / rep.candidate_ms
    rep.timing = timing.CUDA_NOTE if DEVICE == "cuda" else timing.CPU_NOTE


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
