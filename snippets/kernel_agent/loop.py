"""The loop: propose(task, feedback) -> source, evaluate, feed the report back; stop at a target speedup,
when the budget is spent, or when the proposer has nothing more.

Plug in any model: LLMProposer takes a function prompt -> reply text (your client's call), so the loop
itself needs no network. ScriptedProposer walks a fixed list, which makes the loop testable offline.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Protocol

from snippets.kernel_agent import profile
from snippets.kernel_agent.harness import DEVICE, Report, evaluate
from snippets.kernel_agent.spec import Task, describe


@dataclass
class Feedback:
    round: int
    report: Report
    best: Report | None

    def text(self) -> str:
        best = f"best so far: {self.best.name}, {self.best.speedup:.3g}x" if self.best else "nothing correct yet"
        return f"round {self.round}: {self.report.summary()}\n{best}"


class Proposer(Protocol):
    def propose(self, task: Task, feedback: Feedback | None) -> str | None:
        """The next candidate's source (None: nothing more to try)."""


class ScriptedProposer:
    """Proposes the given sources in order, ignoring feedback."""

    def __init__(self, sources: list[str]):
        self.sources, self.seen = list(sources), []

    def propose(self, task: Task, feedback: Feedback | None) -> str | None:
        if feedback is not None:
            self.seen.append(feedback)
        return self.sources.pop(0) if self.sources else None


class LLMProposer:
    """Builds a prompt from the task and the last report; `complete(prompt) -> text` is your model client.
    The reply's first ```python block is the candidate."""

    def __init__(self, complete: Callable[[str], str], mode: str = "smoke"):
        self.complete, self.mode, self.prompts = complete, mode, []

    def propose(self, task: Task, feedback: Feedback | None) -> str | None:
        prompt = (f"{describe(task, self.mode)}\nUse Triton (@triton.jit) or CUDA C++ via load_inline.\n"
                  + (feedback.text() if feedback else "first attempt") +
                  "\nReply with the whole module in one ```python block.")
        self.prompts.append(prompt)
        found = re.search(r"```(?:python)?\n(.*?)```", self.complete(prompt), re.S)
        return found.group(1) if found else None


@dataclass
class LoopResult:
    history: list[Report] = field(default_factory=list)
    best: Report | None = None
    stopped: str = ""


def run_loop(task: Task, proposer: Proposer, target: float = 1.5, budget: int = 5,
             judge: Callable[..., Report] = evaluate, ncu: bool = True, **kw) -> LoopResult:
    """Iterate until a correct candidate is at least `target` times faster than eager, or `budget` rounds.
    ncu: add Nsight Compute metrics of each accepted candidate to its report, where ncu is available."""
    result, feedback = LoopResult(), None
    for i in range(1, budget + 1):
        source = proposer.propose(task, feedback)
        if source is None:
            result.stopped = "proposer has nothing more"
            return result
        report = judge(task, source, name=f"round {i}", **kw)
        if ncu and report.correct:
            add_profile(report, task, source)
        result.history.append(report)
        if report.correct and (result.best is None or report.speedup > result.best.speedup):
            result.best = report
        if report.correct and report.speedup >= target:
            result.stopped = f"target {target:g}x reached"
            return result
        feedback = Feedback(i, report, result.best)
    result.stopped = f"budget of {budget} rounds spent"
    return result


def add_profile(report: Report, task: Task, source: str, device: str = DEVICE) -> None:
    """ncu's metrics into the report, or the reason there are none: never silently nothing."""
    reason = profile.unavailable(device)
    if reason:
        report.profile_note = f"ncu: not run ({reason})"
        return
    try:
        report.profile = profile.profile(task, source)
    except profile.ProfileError as e:
        report.profile_note = f"ncu: failed ({e})"
