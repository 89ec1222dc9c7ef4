"""One worker process per candidate: a crash, hang or memory hog ends the worker, never the harness.

Workers fork from a forkserver that has imported torch and Triton once (a fresh process per candidate
in ~10 ms instead of ~2 s). Each worker starts its own process group (a timeout kills it and anything it
spawned, nvcc included) and, on the CPU, caps its address space with RLIMIT_AS. On CUDA the driver
reserves far more address space than it uses, so there the parent watches the worker's resident memory.
Replies travel as torch.save bytes and are read with weights_only=True: tensors and plain data only.
"""
from __future__ import annotations

import importlib.util
import io
import multiprocessing as mp
import os
import resource
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from snippets.kernel_agent import checks, timing

PRELOAD = ["torch", "triton", "triton.language", "snippets.kernel_agent.sandbox"]


@dataclass(frozen=True)
class Limits:
    call_s: float = 20.0  # one correctness trial; the timing phase gets call_s per run
    load_s: float = 300.0  # importing the candidate (load_inline compiles for a minute or more)
    memory_gb: float = 4.0  # host memory the candidate may take beyond the worker's own


class SandboxError(Exception):
    """The worker crashed, timed out or ran out of memory: verdict and reason for the report."""

    def __init__(self, verdict: str, reason: str):
        super().__init__(reason)
        self.verdict, self.reason = verdict, reason


_CONTEXT = None


def _context():
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = mp.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def _rss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Worker:
    """The parent's handle: request(cmd, timeout, **args) -> reply dict, or SandboxError."""

    def __init__(self, device: str, limits: Limits):
        ctx = _context()
        self.conn, child = ctx.Pipe()
        self.limits, self.device = limits, device
        self.tmp = tempfile.mkdtemp(prefix="candidate-")  # removed by close(), even after a crash
        self.proc = ctx.Process(target=_serve, args=(child, device, int(limits.memory_gb * 2**30), self.tmp),
                                daemon=True)
        self.proc.start()
        child.close()
        self.rss0 = None

    def request(self, cmd: str, timeout: float, **args) -> dict:
        try:
            self.conn.send((cmd, args))
        except (BrokenPipeError, OSError):
            raise self._died(cmd) from None
        deadline = time.monotonic() + timeout
        while not self.conn.poll(min(0.1, max(deadline - time.monotonic(), 0))):
            if time.monotonic() >= deadline:
                self.kill()
                raise SandboxError("timeout", f"timed out: no answer within {timeout:g} s during '{cmd}' "
                                              "(hang or endless loop); process group killed")
            rss = _rss_bytes(self.proc.pid)
            if self.rss0 is not None and rss > self.rss0 + self.limits.memory_gb * 2**30:
                self.kill()
                raise SandboxError("out of memory", f"out of memory: resident memory {rss / 2**30:.1f} GiB "
                                                    f"over the {self.limits.memory_gb:g} GiB limit; killed")
        try:
            reply = torch.load(io.BytesIO(self.conn.recv_bytes()), weights_only=True)
        except (EOFError, OSError):
            raise self._died(cmd) from None
        self.rss0 = self.rss0 or _rss_bytes(self.proc.pid)
        return reply

    def _died(self, cmd: str) -> SandboxError:
        self.proc.join(5)
        code = self.proc.exitcode
        how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
        return SandboxError("crashed", f"crashed: the worker died ({how}) during '{cmd}'")

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.kill()
        self.proc.join(5)

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(("exit", {}))
                self.proc.join(2)
            except (BrokenPipeError, OSError):
                pass
        self.kill()
        self.conn.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _serve(conn, device: str, memory_bytes: int, tmp: str) -> None:
    """The worker's loop: answer (cmd, args) requests until 'exit'."""
    os.setsid()
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
        torch.set_num_threads(1)
        in_use = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (in_use + memory_bytes, hard))
    state = _State(device, tmp)
    while True:
        cmd, args = conn.recv()
        if cmd == "exit":
            return
        try:
            reply = getattr(state, cmd)(**args)
        except BaseException as e:  # the candidate's exception is a result, not the worker's end
            reply = {"error": f"{type(e).__name__}: {e}"[:2000]}
        buf = io.BytesIO()
        torch.save(reply, buf)
        conn.send_bytes(buf.getvalue())


class _State:
    def __init__(self, device: str, tmp: str):
        self.device, self.tmp, self.fn, self.module, self.prev = device, tmp, None, None, None

    def _to_device(self, tensors) -> list[torch.Tensor]:
        return [t.to(self.device) for t in tensors]

    def baseline(self, task_name: str, sets: list, warmup: int, runs: int) -> dict:
        """Time the task's eager baseline; called before the candidate is loaded, so it cannot touch it."""
        from snippets.kernel_agent.spec import TASKS

        fn = TASKS[task_name].baseline
        dev_sets = [self._to_device(s) for s in sets]
        bufs = [t.clone() for t in dev_sets[0]]
        times, _ = timing.time_rotating(lambda: fn(*bufs), dev_sets, bufs, None, self.device, warmup, runs)
        return {"times": times}

    def load(self, source: str, entry: str) -> dict:
        """Import the source from a file (Triton's @jit reads its function's source through inspect)."""
        path = Path(self.tmp) / "candidate.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("candidate", path)
        self.module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.module)
        self.fn = getattr(self.module, entry)
        return {"ok": True}

    def run(self, inputs: list, names: list, out_shape: tuple, dtype: torch.dtype, join_s: float) -> dict:
        """One trial: poisoned output, cloned inputs; report what only this process can see."""
        ins = self._to_device(inputs)
        clones = [t.clone() for t in ins]
        out = torch.full(out_shape, float("nan"), dtype=dtype, device=self.device)
        threads = set(threading.enumerate())
        self.fn(*ins, out)
        seen = out.clone()  # what the caller gets when the call returns (on CUDA: ordered on this stream)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()  # every stream
        for t in set(threading.enumerate()) - threads:
            t.join(join_s)
        flags = []
        if self.prev is not None and not checks.same(*self.prev):
            flags.append(f"{checks.REUSED_BUFFER} (wrote into the previous call's output after that call returned)")
        if not checks.same(out, seen):
            flags.append(f"{checks.LATE_WRITE} (work left running on another stream or thread: a timer on the "
                         "calling stream would miss it)")
        for name, a, b in zip(names, ins, clones):
            if not checks.same(a, b):
                changed = a.ne(b) & ~(a.isnan() & b.isnan())
                flags.append(f"{checks.INPUT_MUTATED} ({name} changed {checks.where(changed)})")
        self.prev = (out, out.clone())
        return {"out": seen.cpu(), "flags": flags}

    def time(self, sets: list, out_shape: tuple, dtype: torch.dtype, warmup: int, runs: int) -> dict:
        dev_sets = [self._to_device(s) for s in sets]
        bufs = [t.clone() for t in dev_sets[0]]
        out = torch.empty(out_shape, dtype=dtype, device=self.device)
        times, last = timing.time_rotating(lambda: self.fn(*bufs, out), dev_sets, bufs, out, self.device,
                                           warmup, runs)
        return {"times": times, "outs": last}

    def resources(self) -> dict:
        """Registers, spills and shared memory of each compiled Triton kernel (none in the interpreter)."""
        found = {}
        for name, obj in vars(self.module).items():
            for cache in getattr(obj, "device_caches", {}).values():
                for compiled in cache[0].values():
                    md = getattr(compiled, "metadata", None)
                    found[name] = {"registers": int(getattr(compiled, "n_regs", -1) or -1),
                                   "spills": int(getattr(compiled, "n_spills", -1) or 0),
                                   "shared_bytes": int(getattr(md, "shared", -1)),
                                   "num_warps": int(getattr(md, "num_warps", -1))}
        return {"resources": found}
