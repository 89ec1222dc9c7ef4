"""The evaluator never falls over (snippets/kernel_agent): a malformed reply, a huge stderr line or a source
built to make a scan slow becomes a verdict with a reason, never a traceback or unbounded time and memory.

The replies come from an in-process launcher that behaves, except for the one field hypothesis replaces.
"""
import collections
import os
import random
import subprocess
import sys
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from snippets.kernel_agent import harness, rules, timing
from snippets.kernel_agent.candidates import REFERENCE
from snippets.kernel_agent.sandbox import Limits, SandboxError, Worker
from snippets.kernel_agent.tasks import TASKS
from snippets.kernel_agent.worker import HEADER, digest, make_inputs

TASK = TASKS["softmax"]
SOURCE = REFERENCE["softmax"]
SETTINGS = harness.Settings(mode="smoke", shapes=1, trials_per_shape=1, calls=2, warmup=1, trusted=True)
BASE = timing.Baseline([timing.Measured([5.0] * SETTINGS.calls, 60.0)] * 2)


class Launcher:
    """A well-behaved launcher in this process, except that its reply to `bad[0]` gets field `bad[1]` = `bad[2]`."""

    def __init__(self, bad=(None, None, None)):
        self.bad, self.outs, self.names = bad, [], sorted(rules.own_kernels(SOURCE))

    def request(self, cmd, timeout, **args):
        reply = getattr(self, cmd)(**args)
        if cmd == self.bad[0]:
            reply = {**reply, self.bad[1]: self.bad[2]}
        return reply

    def load(self, **_):
        return {"ok": True}

    def run(self, specs, seed, out_shape, out_dtype, join_s):
        ins = make_inputs(specs, seed, "cpu")
        return {"out": TASK.reference_of(ins).to(TASK.dtype), "inputs": ins, "late": False, "outside": False,
                "profile": {}, "launches": {n: 1 for n in self.names}}

    def warm(self, **_):
        return {"ok": True}

    def profile_start(self):
        return {"ok": True}

    def time(self, specs, seeds, out_shape, out_dtype, key):
        self.outs = [TASK.reference_of(make_inputs(specs, s, "cpu")).to(TASK.dtype) for s in seeds]
        return {"times": [5.0] * len(seeds), "digests": [digest(o, key) for o in self.outs]}

    def profile_stop(self):
        return {"profile": {}, "launches": {n: len(self.outs) for n in self.names}}

    def fetch(self, indices):
        return {"outs": [self.outs[i] for i in indices]}


def judge(launcher) -> str | None:
    """None when accepted, else the reason; any other exception escapes (and fails the test)."""
    rep = harness.Report(TASK.name, "fuzzed")
    try:
        harness._trials(TASK, SOURCE, SETTINGS, launcher, random.Random(1), rep)
        harness._timed(TASK, SOURCE, SETTINGS, launcher, random.Random(2), rep, BASE)
    except harness._Failed as f:
        return f.reason
    return None


def test_the_well_behaved_launcher_is_accepted():
    assert judge(Launcher()) is None


_tensors = st.builds(lambda shape, dtype: torch.zeros(shape, dtype=dtype),
                     st.lists(st.integers(0, 3), max_size=2), st.sampled_from([torch.float32, torch.int64, torch.bool]))
_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4) | _tensors,
                       lambda inner: st.lists(inner, max_size=3)
                       | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=3), max_leaves=6)
_FIELDS = {"run": ["out", "inputs", "late", "outside", "profile", "launches", "error"],
           "time": ["times", "digests", "error"], "profile_stop": ["profile", "launches", "error"],
           "fetch": ["outs", "error"]}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(_FIELDS)).flatmap(lambda c: st.tuples(st.just(c), st.sampled_from(_FIELDS[c]))), _values)
def test_any_malformed_field_of_any_reply_is_a_verdict_not_a_crash(where, value):
    judge(Launcher((*where, value)))


@pytest.mark.parametrize("cmd, key, value, words", [
    ("run", "profile", {1: [1, 100]}, "the profile is not the launcher's"),                 # an integer profile key
    ("profile_stop", "launches", {"softmax_rows": torch.ones(3)}, "launch counts"),
    ("time", "times", [float("inf"), 5.0], "'time' replied 2 times for 2 calls"),
    ("time", "digests", [torch.tensor(1), torch.tensor(2)], "committed 2 outputs"),
    ("fetch", "outs", [], "'fetch' returned 0 outputs"),
    ("run", "inputs", [], "'run' returned 0 inputs"),
])
def test_named_malformed_replies(cmd, key, value, words):
    reason = judge(Launcher((cmd, key, value)))
    assert reason is not None and words in reason, reason


def _worker_reading(reply: bytes) -> Worker:
    """A Worker whose launcher already sent `reply` (framed) on its pipe."""
    w = object.__new__(Worker)
    w.limits, w.device, w.rid, w.rss0, w.scratch = Limits(), "cpu", 0, None, None
    w.stderr = collections.deque(maxlen=64)
    r_out, w.fd_out = os.pipe()
    w.fd_in, w_in = os.pipe()
    os.write(w_in, HEADER.pack(len(reply)) + reply)
    w.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    w._pipes = (r_out, w_in)
    return w


@pytest.mark.parametrize("rid", [torch.tensor([1, 1]), torch.tensor(1), 1.0, True, "1"])
def test_a_reply_with_a_request_id_that_is_not_an_int_is_a_protocol_violation(rid):
    import io

    buf = io.BytesIO()
    torch.save((rid, {"ok": True}), buf)
    w = _worker_reading(buf.getvalue())
    try:
        with pytest.raises(SandboxError, match="protocol violation: a reply to request"):
            w.request("load", 5)
    finally:
        w.close()
        for fd in w._pipes:
            os.close(fd)


def test_a_huge_stderr_line_costs_bounded_memory():
    w = object.__new__(Worker)
    w.stderr = collections.deque(maxlen=64)
    w.proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stderr.write('x' * (64 << 20) + '\\nlast\\n')"],
                              stderr=subprocess.PIPE)
    w._drain()
    w.proc.wait()
    assert list(w.stderr) == ["x" * 400, "last"]


@pytest.mark.parametrize("source", [
    "# " + "__global__ " + "a " * 120_000,          # one __global__ and a long run of words: was quadratic
    "/*" + "__global__ void k(" * 12_000 + "*/",  # many of them
])
def test_scanning_a_source_built_to_be_slow_is_fast(source):
    start = time.perf_counter()
    rules.own_kernels(source)
    harness.check_source(source, TASK)
    assert time.perf_counter() - start < 2.0


def test_a_source_over_the_limit_is_rejected_before_anything_runs():
    rep = harness.evaluate(TASK, "#" * (harness.MAX_SOURCE + 1), settings=SETTINGS)
    assert rep.verdict == "rejected" and rep.reason.startswith("source too large") and rep.trials == 0


def test_a_fault_of_the_harness_is_could_not_evaluate(monkeypatch):
    monkeypatch.setattr(harness, "baseline", lambda task, s: 1 / 0)
    rep = harness.evaluate(TASK, SOURCE, settings=SETTINGS)
    assert rep.verdict == "error" and rep.reason.startswith("could not evaluate: the harness failed (ZeroDivisionError")


class Cacher(Launcher):
    """Right on every trial; in the timed request it serves the answer it computed in the warm-up."""

    def warm(self, specs, seeds, out_shape, out_dtype, calls):
        self.cached = TASK.reference_of(make_inputs(specs, seeds[0], "cpu")).to(TASK.dtype)
        return {"ok": True}

    def time(self, specs, seeds, out_shape, out_dtype, key):
        self.outs = [self.cached.clone() for _ in seeds]
        return {"times": [5.0] * len(seeds), "digests": [digest(o, key) for o in self.outs]}


def test_an_answer_cached_from_the_warm_up_is_named_as_caching():
    reason = judge(Cacher())
    assert reason is not None and "returns a cached result (the answer to an untimed warm-up call's inputs" in reason
