"""Run a fault scenario with one process per rank and keep what it leaves behind.

A job directory gets the evidence layout the doctor reads:

    rank<R>.log    everything rank R wrote to file descriptors 1 and 2 (prints, tracebacks,
                   PyTorch's C++ watchdog messages)
    nccl.<R>.log   NCCL_DEBUG output of rank R (NCCL backend, when `debug` turns NCCL_DEBUG on)
    fr.<R>         Flight Recorder dump written by the NCCL watchdog on timeout (pickle)
    fr.<R>.json    Flight Recorder dump written by the rank itself (gloo, or a run that ended)
    launcher.log   `rank <R> exitcode <code> after <s> s`, as torchrun's summary would say

Each rank is a subprocess with its own environment, so each gets its own NCCL_DEBUG_FILE and its
own log file on fds 1 and 2 (redirecting sys.stdout in Python would miss the C++ messages).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from snippets.nccl.scenarios import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]

# --8<-- [start:env]
FLIGHT_RECORDER_ENV = {
    # entries per rank; > 0 turns the Flight Recorder on. The older name TORCH_NCCL_TRACE_BUFFER_SIZE
    # still works but prints a deprecation warning in every rank's log (torch 2.13), even next to this one.
    "TORCH_FR_BUFFER_SIZE": "2000",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",  # the NCCL watchdog writes the dump when a collective times out
    "TORCH_NCCL_ENABLE_TIMING": "1",  # start events, so entries have duration_ms
    "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "3000",  # how long a timed-out rank waits for its dump
}
NO_MULTICAST_ENV = {  # keep NVLink SHARP (multicast) off on the H200 machine
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
DEBUG_PRESETS = {
    "nccl_info": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,GRAPH,NET"},
    "nccl_coll": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,COLL"},
    "detail": {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"},
    "desync": {"TORCH_NCCL_DESYNC_DEBUG": "1"},
}
# --8<-- [end:env]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, job_dir: Path, backend: str, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(FLIGHT_RECORDER_ENV)
    env.update(NO_MULTICAST_ENV)
    env.update(extra)
    env.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
        TORCH_FR_DUMP_TEMP_FILE=f"{job_dir}/fr.", TORCH_NCCL_DEBUG_INFO_TEMP_FILE=f"{job_dir}/fr.",
        PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    if backend == "nccl":
        env["NCCL_DEBUG_FILE"] = f"{job_dir}/nccl.{rank}.log"
    return env


@dataclass
class JobResult:
    job_dir: Path
    scenario: str
    backend: str
    world: int
    exitcodes: dict[int, int]
    seconds: dict[int, float]
    killed: set[int] = field(default_factory=set)  # ranks the launcher killed at the wall limit
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.exitcodes.values())


class Job:
    """A started job; `wait()` returns its JobResult. Start several to run them side by side."""

    def __init__(self, scenario: str, backend: str, world: int, job_dir, timeout_s: float = 5.0,
                 debug: dict[str, str] | None = None, wall_s: float | None = None):
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
        if backend not in SCENARIOS[scenario].backends:
            raise ValueError(f"scenario {scenario!r} does not run on {backend}")
        self.scenario, self.backend, self.world, self.timeout_s = scenario, backend, world, timeout_s
        self.job_dir = Path(job_dir)
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.wall_s = wall_s if wall_s is not None else 4 * timeout_s + 20
        extra = {**SCENARIOS[scenario].env.get(backend, {}), **(debug or {})}
        port = free_port()
        cmd = [sys.executable, "-m", "snippets.nccl.scenarios", scenario, "--backend", backend,
               "--timeout", str(timeout_s)]
        self.t0 = time.monotonic()
        self.procs: dict[int, subprocess.Popen] = {}
        for r in range(world):
            with open(self.job_dir / f"rank{r}.log", "wb") as log:  # the child keeps its own copy of the fd
                env = rank_env(r, world, port, self.job_dir, backend, extra)
                self.procs[r] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                                 stderr=subprocess.STDOUT, start_new_session=True)
        self._reaper = threading.Thread(target=self._reap, daemon=True)
        self._reaper.start()

    def wait(self) -> JobResult:
        self._reaper.join()
        return self._result

    def _reap(self) -> None:
        exitcodes, seconds, killed = {}, {}, set()
        while len(exitcodes) < self.world:
            elapsed = time.monotonic() - self.t0
            for r, p in self.procs.items():
                if r not in exitcodes and p.poll() is not None:
                    exitcodes[r], seconds[r] = p.returncode, elapsed
            if elapsed > self.wall_s:
                for r, p in self.procs.items():
                    if r not in exitcodes:
                        try:
                            os.killpg(p.pid, signal.SIGKILL)
                        except ProcessLookupError:  # it exited just now
                            pass
                        exitcodes[r], seconds[r] = p.wait(), elapsed
                        killed.add(r)
            time.sleep(0.02)
        self._write_log(exitcodes, seconds, killed)
        self._result = JobResult(self.job_dir, self.scenario, self.backend, self.world, exitcodes, seconds, killed,
                                 time.monotonic() - self.t0)

    def _write_log(self, exitcodes, seconds, killed) -> None:
        lines = [f"# launcher: backend={self.backend} world={self.world} timeout_s={self.timeout_s}"]
        for r in sorted(exitcodes):
            note = f" (killed by launcher: wall limit {self.wall_s:g} s)" if r in killed else ""
            lines.append(f"rank {r} exitcode {exitcodes[r]} after {seconds[r]:.2f} s{note}")
        (self.job_dir / "launcher.log").write_text("\n".join(lines) + "\n")


def run_job(scenario: str, backend: str, world: int, job_dir, timeout_s: float = 5.0,
            debug: dict[str, str] | None = None, attempts: int = 3) -> JobResult:
    """Run `scenario` with `world` ranks on `backend` ('gloo' or 'nccl') and wait for it.

    A free port can be taken by another process between free_port() and rank 0 binding it; then the
    job is started again on a new port (up to `attempts` times), as an elastic launcher would.
    """
    for _ in range(attempts):
        result = Job(scenario, backend, world, job_dir, timeout_s, debug).wait()
        if not port_was_taken(result.job_dir):
            return result
        for f in result.job_dir.iterdir():
            if f.is_file():
                f.unlink()
    return result


def port_was_taken(job_dir: Path) -> bool:
    log = job_dir / "rank0.log"
    return log.exists() and "EADDRINUSE" in log.read_text(errors="replace")
