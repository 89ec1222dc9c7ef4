"""Re-record what is not fresh, in the time there is (`make gpu-run STALE=1 [BUDGET_S=1500]`).

The labs whose result on this GPU is stale, legacy, missing or unverifiable (kb/freshness.py) run most
quoted first, each in a process of its own (`python -m kb.gpu_run NOTEBOOK`, which writes its result as
usual). A lab starts only if its expected duration (its last run's `seconds`, else MAX_LAB_S) fits in what
is left of the budget, and is stopped, with every process it started, when the budget runs out; a lab that
does not fit is left for the next run, which continues where this one stopped. A lab this machine cannot run
in full (fewer GPUs than it needs, or than its last result was recorded on, or the wrong architecture) is
skipped with a message: a one-GPU run would replace a result with one that lacks its multi-GPU numbers.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kb.freshness import LabState, lab_states, quote_counts
from kb.labs import ROOT, lab_meta, unmet_needs

MAX_LAB_S = 480          # one lab's full run on an H200 fits one 10-minute GPU job with margin
DEFAULT_BUDGET_S = 1500  # a 30-minute GPU slot, less the machine's start and the transfers
GRACE_S = 15             # after SIGTERM, before SIGKILL


@dataclass
class Step:
    notebook: str
    state: str
    expect_s: float
    skip: str | None = None   # why this machine does not run it


def plan(states: list[LabState], counts: dict[str, int], gpu_count: int, capability: str | None) -> list[Step]:
    """The labs to re-record, most quoted first (then by name), each with its expected seconds or why not here."""
    steps = []
    for s in sorted((s for s in states if s.state != "fresh"), key=lambda s: (-counts.get(s.notebook, 0), s.stem)):
        why = unmet_needs(lab_meta(ROOT / s.notebook), gpu_count, capability)
        recorded_on = s.result.data["device"]["count"] if s.result else 0
        if why is None and recorded_on > gpu_count:
            why = (f"its result was recorded on {recorded_on} GPUs and this machine has {gpu_count}: re-record it "
                   "where it runs in full")
        expect = float(s.result.data.get("seconds") or MAX_LAB_S) if s.result else float(MAX_LAB_S)
        steps.append(Step(s.notebook, s.state, expect, why))
    return steps


def _descendants(pid: int) -> set[int]:
    """Every live process below pid (from /proc), including those that started sessions of their own."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _kill(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def launch(cmd: list[str], timeout: float) -> int | None:
    """Run cmd; its exit status, or None when it was stopped at the timeout with everything it started."""
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        below = _descendants(proc.pid)  # the notebook's kernel runs in a session of its own
        proc.terminate()
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        _kill(below | _descendants(proc.pid) | {proc.pid}, signal.SIGKILL)
        proc.wait()
        return None


def run(steps: list[Step], budget_s: float, child_args: list[str],
        launch: Callable[[list[str], float], int | None] = launch,
        clock: Callable[[], float] = time.monotonic, say: Callable[[str], None] = print) -> int:
    """Run the steps in order inside budget_s seconds; 0 when every lab that ran was recorded."""
    start, recorded, failed, left_over = clock(), [], [], []
    for step in steps:
        stem = Path(step.notebook).stem
        if step.skip:
            say(f"gpu-run: skipping {stem} ({step.state}): {step.skip}")
            left_over.append(stem)
            continue
        left = budget_s - (clock() - start)
        if step.expect_s > left - GRACE_S:
            say(f"gpu-run: {stem} ({step.state}) takes about {step.expect_s:.0f} s and {max(left, 0):.0f} s of the "
                f"budget are left: left for the next run")
            left_over.append(stem)
            continue
        say(f"gpu-run: re-recording {stem} ({step.state}, about {step.expect_s:.0f} s, {left:.0f} s left)")
        rc = launch([sys.executable, "-m", "kb.gpu_run", step.notebook, *child_args], left - GRACE_S)
        if rc == 0:
            recorded.append(stem)
        elif rc is None:
            say(f"gpu-run: {stem} was stopped at the budget ({budget_s:.0f} s); nothing was written for it")
            failed.append(stem)
        else:
            say(f"gpu-run: {stem} failed (exit status {rc}); its earlier result is kept")
            failed.append(stem)
    took = clock() - start
    say(f"gpu-run: {took:.0f} s of {budget_s:.0f}: recorded {', '.join(recorded) or 'nothing'}; "
        f"failed {', '.join(failed) or 'nothing'}; left for another run {', '.join(left_over) or 'nothing'}")
    return 1 if failed else 0


def main(notebooks: list[Path], budget_s: float, gpu: str, gpu_count: int, capability: str | None,
         child_args: list[str]) -> int:
    """The labs (all, or those named) whose result on this GPU (its results/ slug) is not fresh."""
    wanted = {f"notebooks/{p.name}" for p in notebooks}
    states = [s for s in lab_states(gpu) if not wanted or s.notebook in wanted]
    steps = plan(states, quote_counts(), gpu_count, capability)
    if not steps:
        print("gpu-run: every lab's result is fresh; nothing to re-record")
        return 0
    return run(steps, budget_s, child_args)
