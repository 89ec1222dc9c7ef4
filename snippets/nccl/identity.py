"""Whether the evidence belongs together: one job, one process per rank, the same process groups.

Read while the logs stream by (`Identity.see`): the PyTorch watchdog's "[PG ID n PG GUID g(desc) Rank r]"
lines, with the sequence numbers they report, and the "host:pid:tid" prefix of NCCL's lines. `check`
then compares logs with logs and logs with Flight Recorder dumps, and raises a Problem naming the file
that contradicts the rest, so that evidence from two runs is reported as such, never as a culprit.
"""
from __future__ import annotations

import re
from pathlib import Path

from snippets.nccl.evidence import BadInput

PG = re.compile(r"\[PG ID (\S{1,64}) PG GUID ([^\s(\]]{1,64})(?:\(([^)\]]{0,200})\))? Rank (\d{1,9})\]")
ENQUEUED = re.compile(r"[Ll]ast enqueued (?:NCCL )?work: (\d{1,18})")
WORK = re.compile(r"WorkNCCL\(SeqNum=(\d{1,18}), OpType=(\w{1,40})")
PROCESS = re.compile(r"^(?:\[rank\d{1,9}\]:)?([\w.-]{1,200}):(\d{1,10}):\d{1,10} \[\d{1,4}\] NCCL ")
DEFAULT_PG = "default_pg"


def _op(name: str) -> str:
    """'nccl:all_reduce', 'ALLREDUCE' and '_ALLGATHER_BASE' compared alike."""
    return re.sub(r"[^a-z]", "", name.split(":")[-1].lower())


class Identity:
    def __init__(self):
        self.guids: dict[str, dict[str, Path]] = {}  # PG ID -> GUID -> first file that says so
        self.claims: dict[Path, set[int]] = {}  # file -> default-group ranks its lines speak for
        self.pgs: dict[Path, set[str]] = {}  # file -> GUIDs it names
        self.enqueued: dict[tuple[Path, str], int] = {}  # (file, GUID) -> the most it says was enqueued
        self.work: dict[tuple[Path, str, int], str] = {}  # (file, GUID, seq) -> op of a timed-out work
        self.procs: dict[Path, set[tuple[str, int]]] = {}  # file -> (host, pid) of its NCCL lines

    def see(self, path: Path, line: str) -> None:
        if "PG GUID" in line and (m := PG.search(line)):
            pg_id, guid, desc, rank = m.groups()
            self.guids.setdefault(pg_id, {}).setdefault(guid, path)
            self.pgs.setdefault(path, set()).add(guid)
            if desc == DEFAULT_PG:
                self.claims.setdefault(path, set()).add(int(rank))
            if e := ENQUEUED.search(line):
                key = (path, guid)
                self.enqueued[key] = max(self.enqueued.get(key, 0), int(e[1]))
            if w := WORK.search(line):
                self.work[(path, guid, int(w[1]))] = w[2]
        elif " NCCL " in line and (m := PROCESS.match(line)):
            self.procs.setdefault(path, set()).add((m[1], int(m[2])))


def check(ident: Identity, logs: list[tuple[Path, int | None]], dumps: list) -> None:
    """Raise BadInput naming the first file whose evidence contradicts the rest."""
    for pg_id, guids in ident.guids.items():
        if len(guids) > 1:
            (a, pa), (b, pb) = list(guids.items())[:2]
            raise BadInput.of(pb, "another_job_guid", pg=pg_id, guid=b, other=pa.name, other_guid=a)
    owner: dict[tuple[str, int], tuple[Path, int | None]] = {}
    for path, rank in logs:
        claimed = ident.claims.get(path, set()) - ({rank} if rank is not None else set())
        if rank is not None and claimed:
            raise BadInput.of(path, "log_of_another_rank", rank=rank, other=min(claimed))
        procs = ident.procs.get(path, set())
        if rank is not None and len(procs) > 1:
            raise BadInput.of(path, "two_processes", pids=", ".join(f"{h}:{p}" for h, p in sorted(procs)))
        for proc in procs:
            if proc in owner and owner[proc][1] != rank:
                raise BadInput.of(path, "process_in_two_logs", pid=f"{proc[0]}:{proc[1]}", other=owner[proc][0].name)
            owner.setdefault(proc, (path, rank))
    by_rank = {d.rank: d for d in dumps}
    for path, rank in logs:
        if rank is None or rank not in by_rank:
            continue
        _against_dump(ident, path, by_rank[rank])


def _against_dump(ident: Identity, path: Path, dump) -> None:
    """A rank's log and its own dump tell of the same process groups and the same work."""
    groups = {e.pg for e in dump.entries} | set(dump.last_enqueued)
    for guid in sorted(ident.pgs.get(path, set())):
        if groups and guid not in groups:
            raise BadInput.of(dump.path, "dump_without_logged_pg", pg=guid, log=path.name, pgs=", ".join(sorted(groups)))
        logged, dumped = ident.enqueued.get((path, guid)), dump.last_enqueued.get(guid)
        if logged is not None and dumped is not None and 0 <= dumped < logged:
            raise BadInput.of(dump.path, "dump_older_than_log", pg=guid, dumped=dumped, log=path.name, logged=logged)
    entries = {(e.pg, e.seq): e for e in dump.entries}
    for (p, guid, seq), op in ident.work.items():
        e = entries.get((guid, seq))
        if p == path and e is not None and _op(e.profiling_name or e.op) != _op(op):
            raise BadInput.of(dump.path, "dump_log_other_op", pg=guid, seq=seq, op=e.op, log=path.name, logged=op)
