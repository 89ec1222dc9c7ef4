"""The sandbox, probed from inside: a probe candidate reports what it can see and do by raising it as its error."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

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
found["dev"] = sorted(os.listdir("/dev"))
found["canary_visible"] = os.path.exists("CANARY")
try:
    u = socket.socket(socket.AF_UNIX)
    u.connect("UNIXSOCK")
    found["unix"] = "reached"
except OSError as e:
    found["unix"] = str(e)
for res in ("RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_NPROC"):
    try:
        resource.setrlimit(getattr(resource, res), (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        found["raised"].append(res)
    except (ValueError, OSError):
        pass
raise RuntimeError("PROBE" + json.dumps(found))
'''


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    """What a probe sees from inside, with a canary file and a listening Unix socket planted beside the
    repository (as another checkout would be), outside every folder the sandbox used to hide."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    try:
        beside = Path(tempfile.mkdtemp(prefix=".kb-probe-", dir=ROOT.parent))
    except OSError:
        beside = tmp_path_factory.mktemp("probe")
    (beside / "canary").write_text("secret")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(beside / "s.sock"))
    unix.listen()
    os.environ["KB_PROBE_SECRET"] = "1"
    try:
        with Worker(DEVICE, Limits()) as worker:
            src = (PROBE.replace("ROOT", str(ROOT)).replace("PORT", str(srv.getsockname()[1]))
                   .replace("CANARY", str(beside / "canary")).replace("UNIXSOCK", str(beside / "s.sock")))
            reply = worker.request("load", 60, source=src, entry="kernel")
    finally:
        del os.environ["KB_PROBE_SECRET"]
        srv.close()
        unix.close()
        shutil.rmtree(beside, ignore_errors=True)
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


def test_nothing_beside_the_interpreter_and_the_system_is_visible(seen):
    assert not seen["canary_visible"]
    assert seen["unix"] != "reached" and "No such file" in seen["unix"], seen["unix"]


def test_dev_holds_only_the_minimal_nodes(seen):
    minimal = {"console", "core", "fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin",
               "stdout", "tty", "urandom", "zero"}
    gpu = {p.rsplit("/", 1)[1] for p in sandbox.gpu_devices()} if DEVICE == "cuda" else set()
    assert set(seen["dev"]) <= minimal | gpu, sorted(set(seen["dev"]) - minimal - gpu)


def test_the_view_binds_no_repository_and_nothing_writable():
    argv = sandbox.bwrap_argv("cpu", Limits())
    binds = [argv[i + 2] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind", "--dev-bind")]
    assert "--bind" not in argv and "/" not in binds and str(ROOT) not in binds
    assert argv.index("--remount-ro") > max(i for i, a in enumerate(argv) if a in ("--ro-bind", "--tmpfs"))
    assert all(a not in {"--tmpfs"} or argv[i - 2] == "--size" for i, a in enumerate(argv)), "every tmpfs is sized"


def test_an_interpreter_started_through_a_symbolic_link_still_starts_the_sandbox(tmp_path):
    link = tmp_path / "env"
    link.symlink_to(os.path.realpath(sys.prefix), target_is_directory=True)
    python = link / "bin" / os.path.basename(sys.executable)
    code = ("import sys; from snippets.kernel_agent import sandbox; from snippets.kernel_agent.candidates import "
            "REFERENCE; from snippets.kernel_agent.harness import evaluate; from snippets.kernel_agent.tasks import "
            "TASKS; print(sandbox.isolation_problem('cpu')); r = evaluate(TASKS['softmax'], REFERENCE['softmax']); "
            "print(r.verdict, r.reason)")
    p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0 and p.stdout.splitlines()[-2:] == ["None", "accepted "], p.stdout + p.stderr[-2000:]


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
