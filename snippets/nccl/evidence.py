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

from snippets.nccl.nccl_info import COLL, INIT


class Problem(ValueError):
    """Bad input, one line naming the file. Built from a message key (`Problem.of`), it can be shown in any
    language (`in_language`); built from a text, it is that text in every language."""

    def __init__(self, path, problem: str, key: str | None = None, values: dict | None = None):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem, self.key, self.values = path, problem, key, values or {}

    @classmethod
    def of(cls, path, key: str, **values):
        return cls(path, _problem_text("en", key, values), key, values)

    def in_language(self, lang: str) -> str:
        return f"{self.path}: {_problem_text(lang, self.key, self.values)}" if self.key else str(self)


def _problem_text(lang: str, key: str, values: dict) -> str:
    from snippets.nccl.messages import msg

    return msg(lang, f"problem.{key}", **values)


class BadInput(Problem):
    pass


def show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


OPTYPE = {"ALLREDUCE": "all_reduce", "ALLGATHER": "all_gather", "_ALLGATHER_BASE": "all_gather_into_tensor",
          "REDUCE_SCATTER": "reduce_scatter", "_REDUCE_SCATTER_BASE": "reduce_scatter_tensor",
          "BROADCAST": "broadcast", "REDUCE": "reduce", "ALLTOALL": "all_to_all", "ALLTOALL_BASE": "all_to_all_single",
          "BARRIER": "barrier", "GATHER": "gather", "SCATTER": "scatter", "SEND": "send", "RECV": "recv"}
# Numbers that become ints are at most 18 digits (int() of a longer run of digits may raise); every `.*?` that
# could run to the end of the line from many starting points is bounded, so no pattern is quadratic in a line.
FP = (r"CollectiveFingerPrint\(SequenceNumber=(\d{1,18}), OpType=(\w+), TensorShape=\[([^\]]*)\], "
      r"TensorDtypes=([\w, ]*?),")
PATTERNS = {  # kind -> (a text the line must hold, regex); the first that matches a line wins
    "watchdog_timeout": ("milliseconds before timing out",
                         r"WorkNCCL\(SeqNum=(\d{1,18}), OpType=(\w+).{0,400}?ran for (\d+) milliseconds before timing out"),
    "watchdog_failure": ("failure detected by watchdog",
                         r"failure detected by watchdog at work sequence id: (\d{1,18}) PG status: "
                         r"last enqueued work: (-?\d{1,18}), last completed work: (-?\d{1,18})"),
    "dump_signal": ("Received a dump signal",
                    r"Received a dump signal due to a collective timeout from\s{1,10}rank (\d{1,9}).{0,400}?"
                    r"Last enqueued NCCL work: (-?\d{1,18}), last completed NCCL work: (-?\d{1,18})"),
    "detail_mismatch": ("Detected mismatch between collectives",
                        rf"Detected mismatch between collectives on ranks\. Rank (\d{{1,9}}) is running collective: "
                        rf"{FP}.{{0,4000}}?but Rank (\d{{1,9}}) is running collective: {FP}"),
    "monitored_barrier": ("failed to pass monitoredBarrier", r"Ranks? ([\d, ]+) failed to pass monitoredBarrier"),
    "size_abort": ("Received data size", r"Received data size doesn't match expected size"),
    "gloo_timeout": ("Timed out waiting", r"Timed out waiting (\d+)ms for (recv|send) operation to complete"),
    "peer_gone": ("by peer", r"Connection (?:closed|reset) by peer"),
    "nccl_warn": ("NCCL WARN", r"NCCL WARN (.*)"),
    "nccl_coll": (": opCount", r"NCCL INFO (\w+): opCount"),
    "exception": (("Error", "Exception"), r"\b([A-Z]\w*(?:Error|Exception))\b"),
}
PATTERNS = {k: (need if isinstance(need, tuple) else (need,), re.compile(rx)) for k, (need, rx) in PATTERNS.items()}
RANK_PREFIX = re.compile(r"^\[rank(\d{1,9})\]:|\[PG ID \S+ PG GUID \S+ Rank (\d{1,9})\]")
NETWORK_WORDS = re.compile(r"NET/|\bIB\b|ibv_|[Ss]ocket|Connection|remote|timeout|Timeout")
MAX_LINE_CHARS = 16_384  # a longer line is read as its first 16 KiB (no message the doctor reads is longer)
MAX_PER_KIND = 1_000  # findings of one kind kept per file; past that, the last slot holds the latest
SNIFF_BYTES = 65_536  # how much of a file tells whether it is text


def text_problem(path: Path) -> str | None:
    """Why the file is not a text log ('not_text_nul', 'not_text_undecodable'), judged by its first 64 KiB."""
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    if b"\0" in head:
        return "not_text_nul"
    bad = head.decode("utf-8", errors="replace").count("\ufffd")
    return "not_text_undecodable" if bad > max(16, len(head) // 10) else None


def read_lines(path: Path):
    """(line number, line) of a text file, streamed; numbered as `str.splitlines` numbers them, a line longer
    than MAX_LINE_CHARS cut to that length (the rest is read and dropped, never held)."""
    n = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        while True:
            line = f.readline(MAX_LINE_CHARS)
            if not line:
                return
            if len(line) == MAX_LINE_CHARS and not line.endswith("\n"):
                while (rest := f.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                    pass
            for part in line.splitlines():
                n += 1
                yield n, part


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


GATE = re.compile("|".join(re.escape(n) for need, _ in PATTERNS.values() for n in need))  # any pattern's text
CHECKS = [(kind, n, rx) for kind, (need, rx) in PATTERNS.items() for n in need]


def match_line(line: str) -> tuple[str, re.Match] | None:
    if not GATE.search(line) or line.lstrip().startswith("File \"") or line.startswith("{\"t\""):
        return None
    tried = None
    for kind, need, rx in CHECKS:
        if kind != tried and need in line:
            tried = kind
            if m := rx.search(line):
                return kind, m
    return None


def scan_log(path: Path, rank: int | None, colls: "CollLines | None" = None, ident=None) -> list[Finding]:
    """The lines that matter, streamed; NCCL's COLL lines go to `colls` as well, and every line to
    `ident` (snippets.nccl.identity), where given."""
    out: list[Finding] = []
    count: dict[str, int] = {}
    last: dict[str, int] = {}  # kind -> its slot in `out` once MAX_PER_KIND are kept
    for i, line in read_lines(path):
        if ident is not None:
            ident.see(path, line)
        hit = match_line(line)
        if hit is None:
            if colls is not None and "ncclCommInit" in line:
                colls.init(path, line)
            continue
        kind, m = hit
        p = RANK_PREFIX.search(line)
        f = Finding(kind, int(p[1] or p[2]) if p else rank, path, i, line, m.groups())
        if colls is not None and kind == "nccl_coll":
            colls.add(f)
        count[kind] = count.get(kind, 0) + 1
        if count[kind] <= MAX_PER_KIND:
            out.append(f)
            if count[kind] == MAX_PER_KIND:
                last[kind] = len(out) - 1
        else:  # keep the latest in the last slot: rules read the first few and the last of a kind
            out[last[kind]] = f
    return out


class CollLines:
    """NCCL_DEBUG_SUBSYS=COLL lines by file and communicator, kept small: one signature id per line.

    NCCL 2.28.9 prints opCount 0 on every line, so the n-th line of a communicator is its n-th collective.
    A communicator is known by its commId (ncclCommInit* lines); without one, by its address in that file."""

    def __init__(self):
        self.sigs: dict[tuple, int] = {}  # (op, count, datatype, redop, root) -> id
        self.names: list[tuple] = []
        self.lines: dict[tuple[Path, str], list[tuple[int, int]]] = {}  # (file, comm) -> [(signature id, line)]
        self.comm_ids: dict[Path, dict[str, str]] = {}  # file -> comm address -> commId
        self.rank: dict[Path, int | None] = {}
        self.count: dict[int | None, int] = {}  # rank -> COLL lines, all of them
        self.last: dict[int | None, Finding] = {}  # rank -> its last COLL line

    def init(self, path: Path, line: str) -> None:
        m = INIT.search(line)
        if m and m["commid"]:
            self.comm_ids.setdefault(path, {})[m["comm"]] = m["commid"]

    def add(self, f: Finding) -> None:
        self.count[f.rank] = self.count.get(f.rank, 0) + 1
        self.last[f.rank] = f
        m = COLL.search(f.text[f.text.find("NCCL INFO ") + 10:])
        if not m or m["op"] in ("Send", "Recv"):  # point-to-point counts differ by rank
            return
        sig = (m["op"], int(m["count"]), int(m["dt"]), int(m["redop"]), int(m["root"]))
        if sig not in self.sigs:
            self.sigs[sig] = len(self.names)
            self.names.append(sig)
        self.lines.setdefault((f.path, m["comm"]), []).append((self.sigs[sig], f.line))
        self.rank[f.path] = f.rank

    def by_comm(self) -> dict[str, dict[int, tuple[Path, list[tuple[int, int]]]]]:
        """commId (or 'file:address') -> rank -> (file, [(signature id, line)])."""
        out: dict[str, dict] = {}
        for (path, comm), seq in self.lines.items():
            key = self.comm_ids.get(path, {}).get(comm) or f"{path}:{comm}"
            rank = self.rank.get(path)
            if rank is not None:
                out.setdefault(key, {})[rank] = (path, seq)
        return out


@dataclass
class Exit:
    rank: int
    code: int
    seconds: float
    by_launcher: bool
    quote: str


LAUNCHER_LINE = re.compile(r"^rank (\d{1,9}) exitcode (-?\d{1,9}) after (\d{1,15}(?:\.\d*)?) s( \(killed by launcher)?")


def read_launcher(path: Path) -> dict[int, Exit]:
    exits = {}
    for i, line in read_lines(path):
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
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # files that are not text: (path, why)

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


def _holds(p: Path, needle: bytes, chunk: int = 1 << 20) -> bool:
    """Whether the file holds `needle`, read a chunk at a time."""
    tail = b""
    with open(p, "rb") as f:
        while block := f.read(chunk):
            if needle in tail + block:
                return True
            tail = block[-len(needle):]
    return False


PG_PREFIX = re.compile(r"\[PG ID \S+ PG GUID \S+ Rank (\d{1,9})\]")
TOPO_MAX_BYTES = 1 << 20  # `nvidia-smi topo -m` prints a few KiB


def add_by_content(job: Job, p: Path) -> None:
    from snippets.nccl import nccl_info, topo

    with open(p, "rb") as f:
        head = f.read(SNIFF_BYTES)
    if head[:1] == b"\x80" or (head[:1] == b"{" and _holds(p, b'"entries"')):
        job.dumps.append(p)
        return
    if why := text_problem(p):
        job.skipped.append((p, why))
        return
    nccl = launcher = rank_log = False
    n = 0
    for n, line in read_lines(p):
        if "NCCL" in line and nccl_info.is_nccl_line(line):
            nccl = True
            break
        launcher = launcher or (line.startswith("rank ") and bool(LAUNCHER_START.match(line)))
        rank_log = rank_log or bool((RANK_PREFIX if n == 1 else PG_PREFIX).search(line) or "ProcessGroup" in line
                                    or ((hit := match_line(line)) and hit[0] != "exception"))
    if nccl:
        job.nccl_logs.append((p, nccl_info.parse_file(p).rank))
    elif p.stat().st_size <= TOPO_MAX_BYTES and topo.is_topo(p.read_text(errors="replace")):
        job.topo.append(p)
    elif launcher:
        job.launcher = p
    elif rank_log:
        job.logs.append((p, None))
    else:
        raise BadInput(p, f"not a log of a distributed PyTorch job: none of its {n} lines has a Flight Recorder, "
                          "watchdog, gloo, NCCL or rank marker")


LAUNCHER_START = re.compile(r"rank \d+ exitcode")


def drop_binary(job: Job, fail: bool = True) -> None:
    """Move the logs that are not text (by content, whatever their name) to `skipped`; raise BadInput when
    nothing else is left (and `fail`)."""
    def text(p: Path) -> bool:
        why = text_problem(p)
        if why:
            job.skipped.append((p, why))
        return not why
    job.logs = [(p, r) for p, r in job.logs if text(p)]
    job.nccl_logs = [(p, r) for p, r in job.nccl_logs if text(p)]
    job.topo = [p for p in job.topo if text(p)]
    if job.launcher and not text(job.launcher):
        job.launcher = None
    if fail and job.empty() and job.skipped:
        p, why = job.skipped[0]
        raise BadInput.of(p, why)


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
            for j in subs:
                drop_binary(j)
            if not subs:
                what = "empty folder" if not any(p.iterdir()) else "no evidence in this folder"
                raise BadInput(p, f"{what}: expected rank<R>.log, fr.<R> or fr.<R>.json, nccl.<R>.log, launcher.log")
            jobs += subs
        else:
            drop_binary(job)
            jobs.append(job)
    drop_binary(loose, fail=not jobs)
    if jobs and loose.empty():
        jobs[0].skipped += loose.skipped  # said in the first job's notes
    if jobs and loose.topo and loose.empty_but_topo():  # `doctor JOB topo.txt`: the topology of that job's machine
        for job in jobs:
            job.topo += loose.topo
        return jobs
    return jobs + ([loose] if not loose.empty() else [])
