"""The NCCL timeout doctor: read what a failed job left behind and name the culprit.

    python -m snippets.nccl.doctor JOB_DIR_OR_FILE... [--json] [--lang zh|en]

It reads, in a job folder (the layout `snippets.nccl.launch` writes; other names are ignored):
Flight Recorder dumps `fr.<R>` (pickle) or `fr.<R>.json`, logs `rank<R>.log` (PyTorch's watchdog
messages, gloo errors, TORCH_DISTRIBUTED_DEBUG=DETAIL reports, tracebacks), NCCL_DEBUG logs
`nccl.<R>.log`, `launcher.log` (`rank <R> exitcode <code> after <s> s`) and `nvidia-smi topo -m`
output (`topo*.txt`). Single files are read by content. Several folders give one diagnosis each.

The diagnosis is one of: missing rank, straggler, mismatch, dead rank, network error, none found;
with the culprit rank(s), the collective and its sequence number, the evidence lines (file:line),
and what to do next. Bad input (an empty folder, a truncated dump, another program's log, dumps
of different jobs in one folder) gets a one-line message and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field

from snippets.nccl import flight_recorder as fr
from snippets.nccl import identity, nccl_info
from snippets.nccl.evidence import (NETWORK_WORDS, OPTYPE, TOPO_MAX_BYTES, BadInput, CollLines, Exit, Finding, Job,
                                    RANK_LOG, Problem, collect_jobs, read_launcher, scan_log, show)
from snippets.nccl.messages import languages, msg, msgs

CLASSES = ("missing_rank", "straggler", "mismatch", "dead_rank", "network_error", "none")


@dataclass
class Evidence:
    job: Job
    dumps: list[fr.Dump]
    alignment: fr.Alignment | None
    findings: list[Finding]
    exits: dict[int, Exit]
    lang: str = "en"  # of the lines the doctor writes into the evidence
    colls: CollLines = field(default_factory=CollLines)

    def __post_init__(self):
        self.by_rank = {d.rank: d for d in self.dumps}

    def of(self, *kinds: str) -> list[Finding]:
        return [f for f in self.findings if f.kind in kinds]

    def unreadable(self) -> dict[int, Path]:
        """Rank -> its log, for rank logs (by name) that were skipped because they are not text."""
        return {int(m[1]): p for p, _ in self.job.skipped if (m := RANK_LOG.match(p.name))}

    def world(self) -> list[int]:
        ranks = set(self.exits) | {d.rank for d in self.dumps} | {r for _, r in self.job.logs if r is not None}
        ranks |= set(self.unreadable())  # a rank whose only log was not text is still a rank of the job
        for d in self.dumps:
            ranks |= set(d.world())
        return sorted(ranks)


def gather(job: Job, lang: str = "en") -> Evidence:
    dumps = [fr.load_dump(p) for p in job.dumps]
    dumps = _one_per_rank(dumps)
    fr.check_same_job(dumps)
    exits = read_launcher(job.launcher) if job.launcher else {}
    for d in dumps:
        if exits and d.rank not in exits:
            raise BadInput(d.path, f"rank {d.rank} is not in the job of {show(job.launcher)} (ranks {sorted(exits)})")
    colls, ident = CollLines(), identity.Identity()
    findings = [f for p, r in job.logs + job.nccl_logs for f in scan_log(p, r, colls, ident)]
    _check_comm_ids(job, colls)
    identity.check(ident, job.logs + job.nccl_logs, dumps)
    return Evidence(job, dumps, fr.align(dumps) if dumps else None, findings, exits, lang, colls)


def _check_comm_ids(job: Job, colls: CollLines) -> None:
    """Ranks of one job share the commId of the communicators they are in together (the default one at least)."""
    ids = [(p, set(colls.comm_ids[p].values())) for p, _ in job.nccl_logs if colls.comm_ids.get(p)]
    for p, mine in ids[1:]:
        ref, theirs = ids[0]
        if not mine & theirs:
            raise BadInput.of(p, "another_job_commid", ids=", ".join(sorted(mine)), other=ref.name,
                              other_ids=", ".join(sorted(theirs)))


def _one_per_rank(dumps: list[fr.Dump]) -> list[fr.Dump]:
    """A rank may have the watchdog's pickle and its own JSON dump: keep the one that saw more."""
    best: dict[int, fr.Dump] = {}
    for d in dumps:
        old = best.get(d.rank)
        if old is None:
            best[d.rank] = d
        elif old.path.suffix == d.path.suffix:
            raise fr.DumpError(d.path, f"a second dump for rank {d.rank} (also {old.path.name})")
        elif len(d.entries) > len(old.entries):
            best[d.rank] = d
    return sorted(best.values(), key=lambda d: d.rank)


@dataclass
class Diagnosis:
    job: str
    cls: str  # one of CLASSES
    culprits: list[int]
    op: str | None
    seq: int | None
    pg: str | None = None
    facts: dict = field(default_factory=dict)  # numbers the sentences are built from
    evidence: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)
    environment: list[str] = field(default_factory=list)


def _entry_line(d: fr.Dump, e: fr.Entry, lang: str) -> str:
    where = e.caller()
    return f"{show(d.path)}[{e.index}]: {e.describe()}" + (msg(lang, "doctor.evidence.called_from", where=where)
                                                          if where else "")


def _dump_of(ev: Evidence, rank: int) -> fr.Dump | None:
    return ev.by_rank.get(rank)


def _some(ranks, culprits: list[int], others: int = 2) -> tuple[list[int], int]:
    """The culprits and a few other ranks: what a report on 1024 ranks should quote."""
    rest = [r for r in sorted(ranks) if r not in culprits]
    shown = sorted(list(culprits)[:6] + rest[:others])
    return shown, len(ranks) - len(shown)


def _more(hidden: int, lang: str) -> list[str]:
    return [msg(lang, "doctor.evidence.more_ranks", hidden=hidden)] if hidden else []


def from_detail(ev: Evidence) -> Diagnosis | None:
    """TORCH_DISTRIBUTED_DEBUG=DETAIL compared fingerprints before the collective ran."""
    hits = ev.of("detail_mismatch")
    if not hits:
        return None
    prints: dict[int, tuple] = {}
    for f in hits:
        g = f.groups
        prints[int(g[0])] = (int(g[1]), g[2], g[3], g[4])
        prints[int(g[5])] = (int(g[6]), g[7], g[8], g[9])
    groups: dict[tuple, list[int]] = {}
    for r, (_, op, shape, dtype) in sorted(prints.items()):
        groups.setdefault((op, shape, dtype), []).append(r)
    ref = max(groups, key=lambda s: (len(groups[s]), -min(groups[s])))
    culprits = sorted(r for s, rs in groups.items() if s != ref for r in rs)
    seq = max(p[0] for p in prints.values()) + 1  # DETAIL counts the collectives already issued
    detail = " vs ".join(f"rank {rs[0] if len(rs) == 1 else rs}: {op} [{shape}] {dtype}"
                         for (op, shape, dtype), rs in groups.items())
    return Diagnosis(ev.job.name, "mismatch", culprits, OPTYPE.get(ref[0], ref[0].lower()), seq,
                     facts={"source": "detail", "detail_seq": seq - 1, "detail": detail},
                     evidence=[f.quote() for f in hits[:4]])


def from_monitored_barrier(ev: Evidence) -> Diagnosis | None:
    """DETAIL (or a monitored_barrier call) names the ranks that never arrived; the collective they
    missed was never issued, so it is the one after the last that every dump recorded."""
    barrier = ev.of("monitored_barrier")
    if not barrier:
        return None
    late = sorted({int(r) for f in barrier for r in re.findall(r"\d+", f.groups[0])})
    last = [max(e.seq for e in d.entries) for d in ev.dumps if d.entries]
    seq = max(last) + 1 if last else None
    return Diagnosis(ev.job.name, "missing_rank", late, None, seq, facts={"source": "monitored_barrier"},
                     evidence=[f.quote() for f in barrier[:3]])


def from_flight_recorder(ev: Evidence) -> Diagnosis | None:
    div = ev.alignment.divergence if ev.alignment else None
    if div is None:
        return None
    lines = []
    shown, hidden = _some(div.at, div.culprits)
    for r in shown:
        d, e = _dump_of(ev, r), div.at[r]
        if e is not None:
            lines.append(_entry_line(d, e, ev.lang))
        else:
            last = max((x for x in d.entries if x.pg == div.pg), key=lambda x: x.seq, default=None)
            lines.append(msg(ev.lang, "doctor.evidence.no_collective", path=show(d.path), seq=div.seq, pg=div.pg)
                         + (msg(ev.lang, "doctor.evidence.its_last", seq=last.seq, name=last.profiling_name,
                                state=last.state) if last else ""))
    lines += _more(hidden, ev.lang)
    cls = "mismatch" if div.kind == "mismatch" else "missing_rank"
    crashed = [r for r in div.culprits if r in ev.exits and ev.exits[r].code != 0 and not ev.exits[r].by_launcher
               and ev.exits[r].seconds <= min(x.seconds for x in ev.exits.values())]
    if cls == "missing_rank" and crashed == div.culprits:
        cls = "dead_rank"  # it wrote a dump on its way out, but it did exit first, with an error
    return Diagnosis(ev.job.name, cls, div.culprits, div.op, div.seq, div.pg,
                     facts={"source": "flight_recorder", "detail": div.detail}, evidence=lines)


def _nccl_op(name: str) -> str:
    """NCCL's 'AllReduce' as PyTorch names it: 'all_reduce'."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", name).lower()


def from_nccl_coll(ev: Evidence) -> Diagnosis | None:
    """NCCL_DEBUG_SUBSYS=COLL lines: the n-th collective of a communicator must be the same call on every rank."""
    first = None
    for comm, ranks in ev.colls.by_comm().items():
        if len(ranks) < 2:
            continue
        lines = {r: seq for r, (_, seq) in ranks.items()}
        for i in range(min(len(s) for s in lines.values())):
            if len({s[i][0] for s in lines.values()}) > 1:
                if first is None or i < first[1]:
                    first = (comm, i)
                break
    if first is None:
        return None
    comm, i = first
    ranks = ev.colls.by_comm()[comm]
    groups: dict[int, list[int]] = {}
    for r in sorted(ranks):
        groups.setdefault(ranks[r][1][i][0], []).append(r)
    ref = fr._reference({sig: rs for sig, rs in groups.items()})
    culprits = sorted(r for sig, rs in groups.items() if sig != ref for r in rs)

    def said(sig: int) -> str:
        op, count, dt, redop, root = ev.colls.names[sig]
        return msg(ev.lang, "doctor.evidence.coll_sig", op=op, count=count, dtype=nccl_info.DATATYPES.get(dt, dt),
                   redop=nccl_info.REDOPS.get(redop, redop), root=root)
    detail = " vs ".join(f"rank {rs[0] if len(rs) == 1 else rs}: {said(sig)}" for sig, rs in groups.items())
    shown, hidden = _some(ranks, culprits)
    lines = [msg(ev.lang, "doctor.evidence.coll_line", path=show(ranks[r][0]), line=ranks[r][1][i][1], n=i + 1,
                 rank=r, call=said(ranks[r][1][i][0])) for r in shown] + _more(hidden, ev.lang)
    if len(groups) == 2 and any(ev.colls.names[sig][:2] == ("AllReduce", 1) for sig in groups):
        lines.append(msg(ev.lang, "doctor.evidence.coll_barrier"))
    return Diagnosis(ev.job.name, "mismatch", culprits, _nccl_op(ev.colls.names[ref][0]), i + 1,
                     facts={"source": "nccl_coll", "detail": detail}, evidence=lines)


def from_size_abort(ev: Evidence) -> Diagnosis | None:
    """gloo without DETAIL: a rank that receives more bytes than it expects aborts (SIGABRT)."""
    hits = ev.of("size_abort")
    if not hits:
        return None
    at = fr.pending(ev.dumps)
    return Diagnosis(ev.job.name, "mismatch", [], at.op if at else None, at.seq if at else None,
                     at.pg if at else None, facts={"source": "gloo_abort", "aborted": sorted({f.rank for f in hits})},
                     evidence=[f.quote() for f in hits[:2]]
                     + ([_entry_line(_dump_of(ev, at.rank), at, ev.lang)] if at else []))


def from_dead_rank(ev: Evidence) -> Diagnosis | None:
    """A rank that exited with an error or a signal and left no dump while the others did."""
    if not ev.dumps:
        return None
    dumped = {d.rank for d in ev.dumps}
    dead = [r for r in ev.world() if r not in dumped
            and (not ev.exits or (r in ev.exits and ev.exits[r].code != 0 and not ev.exits[r].by_launcher))]
    if not dead:
        return None
    at = fr.pending(ev.dumps)
    lines = [ev.exits[r].quote for r in dead if r in ev.exits]
    lines += [msg(ev.lang, "doctor.evidence.no_dump", rank=r) for r in dead]
    if at:
        lines.append(_entry_line(_dump_of(ev, at.rank), at, ev.lang))
    return Diagnosis(ev.job.name, "dead_rank", dead, at.op if at else None, at.seq if at else None,
                     at.pg if at else None, facts={"source": "launcher" if ev.exits else "missing_dump"},
                     evidence=lines)


def from_network(ev: Evidence) -> Diagnosis | None:
    hits = [f for f in ev.of("nccl_warn") if NETWORK_WORDS.search(f.groups[0])]
    if not hits:
        return None
    seq, op = _watchdog_point(ev)
    return Diagnosis(ev.job.name, "network_error", sorted({f.rank for f in hits if f.rank is not None}), op, seq,
                     facts={"source": "nccl_warn"}, evidence=[f.quote() for f in hits[:6]])


def _watchdog_point(ev: Evidence) -> tuple[int | None, str | None]:
    at = fr.pending(ev.dumps)
    if at:
        return at.seq, at.op
    t = ev.of("watchdog_timeout")
    if t:
        return int(t[0].groups[0]), OPTYPE.get(t[0].groups[1], t[0].groups[1].lower())
    w = ev.of("watchdog_failure")
    return (int(w[0].groups[0]), None) if w else (None, None)


def from_watchdog_lines(ev: Evidence) -> Diagnosis | None:
    """No dumps: PyTorch's watchdog lines still say how far each rank got. A rank's timeout line alone says
    it enqueued that collective and did not complete it; a rank with no line at all is named as such."""
    if ev.dumps:
        return None
    progress: dict[int, tuple[int, int]] = {}
    for f in ev.of("watchdog_timeout"):
        if f.rank is not None and f.rank not in progress:
            progress[f.rank] = (int(f.groups[0]), int(f.groups[0]) - 1)
    for f in ev.of("watchdog_failure"):
        progress[f.rank] = (int(f.groups[1]), int(f.groups[2]))
    for f in ev.of("dump_signal"):
        progress[f.rank] = (int(f.groups[1]), int(f.groups[2]))
    hits = ev.of("watchdog_timeout", "watchdog_failure", "dump_signal")
    if not progress:
        return None
    seq, op = _watchdog_point(ev)
    top = max(enq for enq, _ in progress.values())
    behind = sorted(r for r, (enq, _) in progress.items() if enq < top)
    cls = "missing_rank" if behind else "none"
    facts = {"source": "watchdog", "progress": progress}
    evidence = [f.quote() for f in hits[:6]]
    silent = [r for r in ev.world() if r not in progress]
    if silent:
        logs = {**ev.unreadable(), **{r: p for p, r in ev.job.logs + ev.job.nccl_logs if r is not None}}
        facts["silent"] = silent
        evidence += [msg(ev.lang, "doctor.evidence.no_watchdog_line", path=show(logs[r]) if r in logs else "-",
                         rank=r) for r in silent[:8]]
    return Diagnosis(ev.job.name, cls, behind, op, top if behind or seq is None else seq, facts=facts,
                     evidence=evidence)


def from_straggle(ev: Evidence) -> Diagnosis | None:
    st = ev.alignment.straggle if ev.alignment else None
    if st is None:
        return None
    shown, hidden = _some(st.at, st.culprits)
    lines = [_entry_line(_dump_of(ev, r), st.at[r], ev.lang)
             + msg(ev.lang, "doctor.evidence.arrived_late", late_s=st.late_s[r]) for r in shown]
    lines += _more(hidden, ev.lang)
    return Diagnosis(ev.job.name, "straggler", st.culprits, st.op, st.seq, st.pg,
                     facts={"source": "flight_recorder", "late_s": max(st.late_s.values())}, evidence=lines)


RULES = (from_detail, from_monitored_barrier, from_flight_recorder, from_nccl_coll, from_size_abort, from_dead_rank, from_network,
         from_watchdog_lines, from_straggle)


def diagnose(job: Job, lang: str = "en", pytorch: bool = True) -> Diagnosis:
    ev = gather(job, lang)
    diag = next((d for rule in RULES if (d := rule(ev))), None)
    if diag is None:
        seq, op = _watchdog_point(ev)
        diag = Diagnosis(job.name, "none", [], op if ev.findings else None, seq if ev.findings else None,
                         facts={"source": None})
    diag.evidence += _context(ev, diag)
    diag.ranks = _rank_table(ev)
    diag.environment = _environment(ev, lang)
    diag.notes += [msg(lang, "doctor.skipped", path=show(p), problem=msg(lang, f"problem.{why}"))
                   for p, why in job.skipped]
    if pytorch and ev.dumps:
        diag.notes.append(_pytorch_note(ev.dumps, lang))
    return diag


def _context(ev: Evidence, diag: Diagnosis) -> list[str]:
    """The waiting ranks' errors, the culprits' own exceptions and exits: lines worth reading next."""
    out = [f.quote() for f in ev.of("gloo_timeout", "peer_gone", "watchdog_timeout", "watchdog_failure",
                                    "dump_signal")[:4]]
    if diag.facts.get("source") != "detail":
        out = [q for q in out if q not in diag.evidence]
    out += [f.quote() for f in ev.of("exception") if f.rank in diag.culprits][:3]
    out += [ev.exits[r].quote for r in diag.culprits if r in ev.exits and ev.exits[r].quote not in diag.evidence]
    out += _coll_counts(ev)
    return [q for q in dict.fromkeys(out) if q not in diag.evidence]


def _coll_counts(ev: Evidence) -> list[str]:
    last: dict[int, Finding] = {r: f for r, f in ev.colls.last.items() if r is not None}
    count: dict[int, int] = {r: n for r, n in ev.colls.count.items() if r is not None}
    if len(set(count.values())) <= 1:
        return []
    return [msg(ev.lang, "doctor.evidence.coll_count", path=show(last[r].path), line=last[r].line, count=count[r],
                rank=r) for r in sorted(count)]


def _rank_table(ev: Evidence) -> list[str]:
    rows = []
    al = ev.alignment
    pg = min(al.members, key=lambda p: (-len(al.members[p]), p)) if al and al.members else None
    for r in ev.world():
        d = _dump_of(ev, r)
        enq = al.last_enqueued[pg].get(r) if pg and d else None
        done = al.last_completed[pg].get(r) if pg and d else None
        ex = ev.exits.get(r)
        rows.append({"rank": r, "dump": d.path.name if d else None, "last_enqueued": enq, "last_completed": done,
                     "exitcode": ex.code if ex else None, "exit_after_s": ex.seconds if ex else None,
                     "killed_by_launcher": ex.by_launcher if ex else None})
    return rows


def _environment(ev: Evidence, lang: str) -> list[str]:
    from snippets.nccl import nccl_info, topo

    out = []
    if ev.dumps:
        d = ev.dumps[0]
        out.append(msg(lang, "doctor.environment.dumps_lib" if d.comm_lib_version else "doctor.environment.dumps",
                       version=d.version, backend=d.backend, lib=d.comm_lib_version, dumps=len(ev.dumps),
                       world=len(ev.world())))
    logs = sorted(ev.job.nccl_logs, key=lambda x: (x[1] is None, x[1] or 0))
    if logs:
        out.append(nccl_info.parse_file(logs[0][0]).summary(lang))
    for p in ev.job.topo:
        text = p.read_text(errors="replace") if p.stat().st_size <= TOPO_MAX_BYTES else ""
        if not topo.is_topo(text):
            raise BadInput(p, "not `nvidia-smi topo -m` output")
        try:
            out.append(topo.parse(text).render(lang))
        except ValueError as e:
            raise BadInput(p, str(e)) from None
    return out


PYTORCH_MAX_RANKS = 256  # its matching takes about 5 s for 1024 synthetic ranks on a laptop CPU


def _pytorch_note(dumps: list[fr.Dump], lang: str) -> str:
    head = msg(lang, "doctor.pytorch.head")
    if len(dumps) > PYTORCH_MAX_RANKS:
        return head + msg(lang, "doctor.pytorch.skipped", dumps=len(dumps))
    rep = fr.pytorch_report(dumps)
    if rep.failure:
        return head + msg(lang, "doctor.pytorch.failed", failure=rep.failure)
    if rep.seq is None:
        said = " / ".join(dict.fromkeys(rep.lines[:1])) or msg(lang, "doctor.pytorch.nothing_wrong")
        return head + said
    said = [ln for ln in rep.lines if ln.startswith(("Not all ranks", "Collective sequence", "missing ranks",
                                                     "error msg"))]
    return head + "; ".join(said)


def next_steps(diag: Diagnosis, lang: str) -> list[str]:
    """What to do next: the advice for the class (messages/<lang>.yml, doctor.advice), with the case's facts."""
    values = {"culprits": ", ".join(map(str, diag.culprits)) or "?", "op": diag.op or "?", "seq": diag.seq or "?",
              "late_s": diag.facts.get("late_s", 0.0), "detail": diag.facts.get("detail", "")}
    steps = msgs(lang, f"doctor.advice.{diag.cls}", **values)
    if diag.cls == "none" and diag.facts.get("source") == "watchdog":
        stuck = sorted(r for r, (enq, done) in diag.facts["progress"].items() if done < enq)
        if diag.facts.get("silent"):
            steps.insert(0, msg(lang, "doctor.step.watchdog_partial", seq=diag.seq, stuck=stuck,
                                seen=sorted(diag.facts["progress"]), silent=diag.facts["silent"]))
        else:
            steps.insert(0, msg(lang, "doctor.step.watchdog_only", seq=diag.seq, stuck=stuck))
    if diag.cls == "mismatch" and not diag.culprits:
        steps.insert(0, msg(lang, "doctor.step.mismatch_no_culprit"))
    if diag.facts.get("source") == "detail":
        steps.append(msg(lang, "doctor.step.detail_seq", detail_seq=diag.facts["detail_seq"], seq=diag.seq))
    return steps


def render(diag: Diagnosis, lang: str = "en") -> str:
    def label(key: str) -> str:
        return msg(lang, f"doctor.label.{key}")
    who = ", ".join(map(str, diag.culprits)) or msg(lang, "doctor.undetermined")
    lines = [f"{label('job')}: {diag.job}",
             f"{label('diagnosis')}: {msg(lang, f'doctor.class.{diag.cls}')}",
             f"{label('culprits')}: {who if diag.cls != 'none' else '-'}   "
             f"{label('collective')}: {diag.op or '-'}   {label('seq')}: {diag.seq or '-'}"
             + (f"   {label('pg')}: {diag.pg}" if diag.pg else ""),
             f"{label('evidence')}:"]
    lines += [f"  {q.removeprefix(diag.job + '/')}" for q in diag.evidence] or ["  -"]
    shown, hidden = _some([r["rank"] for r in diag.ranks], diag.culprits, others=4)
    lines += [f"{label('ranks')}:"] + [f"  {_row(r, lang)}" for r in diag.ranks if r["rank"] in shown]
    lines += [f"  {msg(lang, 'doctor.more_ranks', hidden=hidden)}"] if hidden else []
    lines += [f"{label('next_steps')}:"] + [f"  {i}. {s}" for i, s in enumerate(next_steps(diag, lang), 1)]
    if diag.notes:
        lines += [f"{label('notes')}:"] + [f"  {n}" for n in diag.notes]
    if diag.environment:
        lines += [f"{label('environment')}:"] + ["  " + e.replace("\n", "\n  ") for e in diag.environment]
    return "\n".join(lines)


def _row(r: dict, lang: str) -> str:
    def num(v, unknown):
        return f"#{v}" if v is not None else unknown
    ex = "-" if r["exitcode"] is None else f"{r['exitcode']} ({r['exit_after_s']:g} s)"
    if r["killed_by_launcher"]:
        ex += msg(lang, "doctor.killed_by_launcher")
    return msg(lang, "doctor.row", rank=r["rank"], dump=r["dump"] or msg(lang, "doctor.row_no_dump"),
               enqueued=num(r["last_enqueued"], "-"),
               completed=num(r["last_completed"], msg(lang, "doctor.row_unknown")), exit=ex)


def diagnose_paths(paths: list[str], lang: str = "en", pytorch: bool = True) -> list[Diagnosis]:
    return [diagnose(job, lang, pytorch) for job in collect_jobs(paths)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m snippets.nccl.doctor", description=__doc__.splitlines()[0])
    p.add_argument("paths", nargs="+", metavar="PATH", help="job folders or single files")
    p.add_argument("--json", action="store_true", help="print the diagnoses as JSON")
    p.add_argument("--lang", choices=languages(), default="en")
    p.add_argument("--no-pytorch", action="store_true", help="skip PyTorch's own Flight Recorder analyser")
    args = p.parse_args(argv)
    try:
        diags = diagnose_paths(args.paths, args.lang, not args.no_pytorch)
    except Problem as e:  # BadInput, fr.DumpError
        print(f"doctor: {e.in_language(args.lang)}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"doctor: {e.filename}: cannot read ({e.strerror})", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([dict(asdict(d), next_steps=next_steps(d, args.lang)) for d in diags], ensure_ascii=False,
                         indent=1))
    else:
        print("\n\n".join(render(d, args.lang) for d in diags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
