"""The red team: every cheat is rejected with a reason of its class, by the evaluator's dynamic defences
alone (the static check only advises), on the CPU here and on the GPU under `pytest -m gpu`; what an escape
would have left behind is looked for outside the sandbox."""
import os
import socket
import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest

from snippets.kernel_agent.candidates import CHEATS
from snippets.kernel_agent.harness import DEVICE, Settings, evaluate
from snippets.kernel_agent.sandbox import Limits
from snippets.kernel_agent.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
# as the lab runs them; on a GPU, 16 timed calls, so a forger has more time to hide than the clock's noise
SETTINGS = Settings.for_device(limits=Limits(call_s=10, memory_gb=1), shapes=2, warmup=1,
                               **({"calls": 16} if DEVICE == "cuda" else {}))


@pytest.fixture(scope="module")
def listener():
    """A TCP server on the harness's loopback: a sandboxed candidate must not reach it."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    accepted = []
    threading.Thread(target=lambda: accepted.append(srv.accept()), daemon=True).start()
    yield srv.getsockname()[1], accepted
    srv.close()


def _marked(marker: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and marker.encode() in (d / "cmdline").read_bytes() and int(d.name) != os.getpid():
                found.append(int(d.name))
        except OSError:
            pass
    return found


def _judge(cheat, tmp_path, listener, monkeypatch):
    monkeypatch.setenv("KB_REDTEAM_SECRET", uuid.uuid4().hex)
    port, accepted = listener
    context = {"canary": tmp_path / "canary", "harness_pid": os.getpid(), "port": port, "root": ROOT,
               "marker": f"kbredteam{uuid.uuid4().hex[:12]}"}
    report = evaluate(TASKS[cheat.task], cheat.render(**context), cheat.name, settings=SETTINGS)
    assert report.verdict != "accepted", report.summary()
    assert any(r in report.reason for r in cheat.reasons), f"{cheat.name}: expected {cheat.reasons}, got {report.reason}"
    assert not context["canary"].exists() and not (ROOT / "escaped").exists()
    assert not accepted, "a sandboxed candidate reached the harness's loopback"
    assert not _marked(context["marker"]), "a process of the candidate outlived its evaluation"
    return report


@pytest.mark.parametrize("cheat", CHEATS, ids=[c.name for c in CHEATS])
def test_every_cheat_is_rejected_for_what_it_does(cheat, tmp_path, listener, monkeypatch):
    _judge(cheat, tmp_path, listener, monkeypatch)


@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA GPU: the red team on the GPU's own defences")
@pytest.mark.parametrize("cheat", CHEATS, ids=[c.name for c in CHEATS])
def test_every_cheat_is_rejected_on_the_gpu(cheat, tmp_path, listener, monkeypatch):
    report = _judge(cheat, tmp_path, listener, monkeypatch)
    assert report.trials >= 1 or cheat.cls in {"forge verdict", "resources"}


def test_the_red_team_is_at_least_forty_cheats_in_at_least_eight_classes():
    classes = Counter(c.cls for c in CHEATS)
    assert len(CHEATS) >= 40 and len(classes) >= 8, classes
    assert min(classes.values()) >= 2, classes
    assert len({c.name for c in CHEATS}) == len(CHEATS)
    for name in ("escape", "forge time", "forge verdict", "tamper", "caching", "schedule", "launder", "precision",
                 "shapes", "async", "resources"):
        assert name in classes
