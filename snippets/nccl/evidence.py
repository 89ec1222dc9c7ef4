"""What a failed job leaves behind, found and read: the doctor's input side.

`collect_jobs` turns command-line paths into jobs (a folder in the layout of
`snippets.nccl.launch`, or loose files recognised by content); `scan_log` finds the lines that
matter in a rank's log (PyTorch watchdog messages, gloo errors, DETAIL reports, NCCL WARN and COLL
lines, exceptions), each with its file and line number; `read_launcher` reads the exit codes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path


class BadInput(ValueError):
    def __init__(self, path, problem: str):
        super().__init__(f"{path}: {problem}")


def show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


OPTYPE = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "_ALLGATHER_BASE": "all_gather_into_tensor",
          "REDUCE_SCATTER": "reduce_scatter", "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
          "BROADCAST": "broadcast", "REDUCE": "reduce", "ALLTOALL": "all_to_all", "ALLTOALL_BASE": "all_to_all_single",
          "BARRIER": "barrier", "GATHER": "gather", "SCATTER": "scatter", "SEND": "send", "RECV": "recv"}
FP = (r"CollectiveFingerPrint\(SequenceNumber=(\d+), OpType=(\w+), TensorShape=\[([^\]]*)\], "
      r"TensorDtypes=([\w, ]*?),")
PATTERNS = {  # kind -> regex; the first that matches a line wins
    "watchdog_timeout": r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+).*?ran for (\d+) milliseconds before timing out",
    "watchdog_failure": r"failure detected by watchdog at work sequence id: (\d+) PG status: "
                        r"last enqueued work: (-?\d+), last completed work: (-?\d+)",
    "dump_signal": r"Received a dump signal due to a collective timeout from\s+rank (\d+).*?"
                   r"Last enqueued NCCL work: (-?\d+), last completed NCCL work: (-?\d+)",
    "detail_mismatch": rf"Detected mismatch between collectives on ranks\. Rank (\d+) is running collective: {FP}"
                       rf".*?but Rank (\d+) is running collective: {FP}",
    "monitored_barrier": r"Ranks? ([\d, ]+) failed to pass monitoredBarrier",
    "size_abort": r"Received data size doesn't match expected size",
    "gloo_timeout": r"Timed out waiting (\d+)ms for (recv|send) operation to complete",
    "peer_gone": r"Connection (?:closed|reset) by peer",
    "nccl_warn": r"NCCL WARN (.*)",
    "nccl_coll": r"NCCL INFO (\w+): opCount",
    "exception": r"\b([A-Z]\w*(?:Error|Exception))\b",
}
PATTERNS = {k: re.compile(v) for k, v in PATTERNS.items()}
RANK_PREFIX = re.compile(r"^\[rank(\d+)\]:|\[PG ID \S+ PG GUID \S+ Rank (\d+)\]")
NETWORK_WORDS = re.compile(r"NET/|\bIB\b|ibv_|[Ss]ocket|Connection|remote|timeout|Timeout")


@dataclass
class Finding:
    kind: str
    rank: int | None
    path: Path
    line: int
    text: str
    groups: tuple

    def quote(self, width: int = 400) -> str:
        text = re.sub(r", TensorDeviceTypes=TensorOptions\((?:[^()]|\([^()]*\))*\)", "", self.text.strip())
        text = text if len(text) <= width else text[:width - 3] + "..."
        return f"{show(self.path)}:{self.line}: {text}"


def scan_log(path: Path, rank: int | None) -> list[Finding]:
    out = []
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if line.lstrip().startswith("File \"") or line.startswith("{\"t\""):
            continue
        for kind, rx in PATTERNS.items():
            m = rx.search(line)
            if m:
                p = RANK_PREFIX.search(line)
                who = int(p[1] or p[2]) if p else rank
                out.append(Finding(kind, who, path, i, line, m.groups()))
                break
    return out


@dataclass
class Exit:
    rank: int
    code: int
    seconds: float
    by_launcher: bool
    quote: str


LAUNCHER_LINE = re.compile(r"^rank (\d+) exitcode (-?\d+) after ([\d.]+) s( \(killed by launcher)?")


def read_launcher(path: Path) -> dict[int, Exit]:
    exits = {}
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = LAUNCHER_LINE.match(line)
        if m:
            exits[int(m[1])] = Exit(int(m[1]), int(m[2]), float(m[3]), bool(m[4]), f"{show(path)}:{i}: {line}")
    if not exits:
        raise BadInput(path, "no 'rank <R> exitcode <code> after <s> s' line: not a launcher log")
    return exits


DUMP_NAME = re.compile(r"^(?:fr\.|nccl_trace_rank_|trace_)(\d+)(?:\.json|\.pkl)?$")
RANK_LOG = re.compile(r"^rank(\d+)\.log$")
NCCL_LOG = re.compile(r"^nccl\.(?:(\d+)|.+)\.log$")


@dataclass
class Job:
    name: str
    dumps: list[Path] = field(default_factory=list)
    logs: list[tuple[Path, int | None]] = field(default_factory=list)
    nccl_logs: list[tuple[Path, int | None]] = field(default_factory=list)
    launcher: Path | None = None
    topo: list[Path] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.topo and self.empty_but_topo()

    def empty_but_topo(self) -> bool:
        return not (self.dumps or self.logs or self.nccl_logs or self.launcher)


def add_by_name(job: Job, p: Path) -> bool:
    if DUMP_NAME.match(p.name):
        job.dumps.append(p)
    elif m := RANK_LOG.match(p.name):
        job.logs.append((p, int(m[1])))
    elif m := NCCL_LOG.match(p.name):
        job.nccl_logs.append((p, int(m[1]) if m[1] else None))
    elif p.name == "launcher.log":
        job.launcher = p
    elif "topo" in p.name and p.suffix in (".txt", ".log", ""):
        job.topo.append(p)
    else:
        return False
    return True


def add_by_content(job: Job, p: Path) -> None:
    from snippets.nccl import nccl_info, topo

    data = p.read_bytes()
    if data[:1] == b"\x80" or (data[:1] == b"{" and b'"entries"' in data):
        job.dumps.append(p)
        return
    text = p.read_text(errors="replace")
    if nccl_info.is_nccl_log(text):
        job.nccl_logs.append((p, nccl_info.parse(text).rank))
    elif topo.is_topo(text):
        job.topo.append(p)
    elif re.search(r"^rank \d+ exitcode", text, re.M):
        job.launcher = p
    elif RANK_PREFIX.search(text) or "ProcessGroup" in text or any(f.kind != "exception" for f in scan_log(p, None)):
        job.logs.append((p, None))
    else:
        n = len(text.splitlines())
        raise BadInput(p, f"not a log of a distributed PyTorch job: none of its {n} lines has a Flight Recorder, "
                          "watchdog, gloo, NCCL or rank marker")


def job_from_dir(d: Path) -> Job:
    job = Job(show(d))
    for p in sorted(d.iterdir()):
        if p.is_file():
            add_by_name(job, p)
    return job


def collect_jobs(paths: list[str]) -> list[Job]:
    jobs, loose = [], Job("(files)")
    for s in paths:
        p = Path(s)
        if not p.exists():
            raise BadInput(p, "no such file or folder")
        if p.is_file():
            if not add_by_name(loose, p):
                add_by_content(loose, p)
            continue
        job = job_from_dir(p)
        if job.empty():
            subs = [job_from_dir(q) for q in sorted(p.iterdir()) if q.is_dir()]
            subs = [j for j in subs if not j.empty()]
            if not subs:
                what = "empty folder" if not any(p.iterdir()) else "no evidence in this folder"
                raise BadInput(p, f"{what}: expected rank<R>.log, fr.<R> or fr.<R>.json, nccl.<R>.log, launcher.log")
            jobs += subs
        else:
            jobs.append(job)
    if jobs and loose.topo and loose.empty_but_topo():  # `doctor JOB topo.txt`: the topology of that job's machine
        for job in jobs:
            job.topo += loose.topo
        return jobs
    return jobs + ([loose] if not loose.empty() else [])
