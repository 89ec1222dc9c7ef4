"""The sandbox, probed from inside: a probe candidate reports what it can see and do by raising it as its error."""
import json
import os
import socket
import subprocess
import sys

import pytest

from snippets.kernel_agent import sandbox
from snippets.kernel_agent.harness import DEVICE, Settings, evaluate
from snippets.kernel_agent.sandbox import IsolationUnavailable, Limits, SandboxError, Worker
from snippets.kernel_agent.tasks import TASKS

ROOT = sandbox.ROOT

PROBE = r'''
import json, os, resource, socket

found = {"uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
         "env": sorted(os.environ), "cwd": os.getcwd(), "repo_visible": os.path.exists("ROOT/snippets"),
         "writable": [], "net": None, "raised": []}
for d in ["/", "/etc", "/usr", "/var", "/tmp", "/dev/shm", os.path.expanduser("~")]:
    try:
        open(os.path.join(d, "probe"), "w").close()
        found["writable"].append(d)
    except OSError:
        pass
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
    found["net"] = "loopback"
except OSError as e:
    found["net_error"] = str(e)
for res in ("RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_NPROC"):
    try:
        resource.setrlimit(getattr(resource, res), (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        found["raised"].append(res)
    except (ValueError, OSError):
        pass
raise RuntimeError("PROBE" + json.dumps(found))
'''


@pytest.fixture(scope="module")
def seen():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    os.environ["KB_PROBE_SECRET"] = "1"
    try:
        with Worker(DEVICE, Limits()) as worker:
            src = PROBE.replace("ROOT", str(ROOT)).replace("PORT", str(srv.getsockname()[1]))
            reply = worker.request("load", 60, source=src, entry="kernel")
    finally:
        del os.environ["KB_PROBE_SECRET"]
        srv.close()
    return json.loads(reply["error"].split("PROBE", 1)[1])


def test_only_its_own_bounded_tmpfs_are_writable(seen):
    assert set(seen["writable"]) == {"/tmp", "/dev/shm"}, seen["writable"]  # home is /tmp


def test_no_network_not_even_the_harness_loopback(seen):
    assert seen["net"] is None and seen["net_error"]


def test_private_process_table_and_no_harness_environment(seen):
    assert len(seen["pids"]) < 10, seen["pids"]  # bubblewrap's init and the launcher, not the machine's
    assert "KB_PROBE_SECRET" not in seen["env"] and "PYTEST_CURRENT_TEST" not in seen["env"]


def test_the_repository_is_hidden(seen):
    assert not seen["repo_visible"]


def test_limits_cannot_be_raised(seen):
    assert seen["raised"] == []


def test_refuses_untrusted_code_where_it_cannot_isolate(monkeypatch):
    monkeypatch.setattr(sandbox, "isolation_problem", lambda device="cpu": "no user namespaces here")
    with pytest.raises(IsolationUnavailable, match="no user namespaces here"):
        Worker(DEVICE, Limits())
    from snippets.kernel_agent.candidates import REFERENCE

    report = evaluate(TASKS["softmax"], REFERENCE["softmax"], settings=Settings(trusted=True))
    assert report.correct, report.summary()  # the caller may vouch for code it wrote


def test_cli_says_why_it_refuses(tmp_path):
    src = tmp_path / "k.py"
    src.write_text("def kernel(x, out): pass\n")
    env = {**os.environ, "PATH": "/nonexistent", "PYTHONPATH": str(ROOT)}
    code = ("import sys; from snippets.kernel_agent import sandbox; sandbox.bwrap = lambda: None; "
            "from snippets.kernel_agent.__main__ import main; sys.exit(main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", code, "evaluate", "--task", "softmax", "--candidate", str(src)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 2 and "refusing to run an untrusted candidate" in p.stderr and "no bwrap" in p.stderr


def test_a_garbled_pipe_is_a_protocol_violation():
    with Worker(DEVICE, Limits()) as worker:
        src = "import os, sys\nos.write(int(sys.argv[2]), (1 << 40).to_bytes(8, 'little'))\n"
        with pytest.raises(SandboxError, match="protocol violation: a reply of 1099511627776 bytes"):
            worker.request("load", 60, source=src, entry="kernel")


def test_a_stalled_reply_times_out():
    with Worker(DEVICE, Limits()) as worker:
        src = "import os, sys, time\nos.write(int(sys.argv[2]), (100).to_bytes(8, 'little'))\ntime.sleep(60)\n"
        with pytest.raises(SandboxError, match="timed out"):
            worker.request("load", 3, source=src, entry="kernel")
