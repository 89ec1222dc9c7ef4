"""Read Flight Recorder dumps and line the ranks up, collective by collective.

Each rank's dump is a ring buffer of its last collectives. Within a process group every rank
numbers its collectives 1, 2, 3, ... (`collective_seq_id`), so the same number on two ranks should
be the same call. `align` walks the numbers and stops at the first one where ranks disagree: a rank
without it (missing), or ranks with a different op, input sizes or dtypes (mismatch). Before that
point it measures how late each rank arrived (`time_created_ns`) to find a straggler.

PyTorch ships its own analyser (`torch.distributed.flight_recorder`, the `torchfrtrace` command, in
torch 2.11 and 2.13); `pytorch_report` runs it on the same dumps and the doctor quotes what it says.
This module goes beyond it where it stops:

- it reads JSON dumps as well as pickles (the analyser reads pickles only), and unpickles with a
  restricted unpickler, since a dump is plain data and pickle can run code;
- gloo dumps key `pg_config` by '' while entries name the group '0' (torch 2.13), which makes the
  analyser fail with `KeyError: ('0', 0)`; here, and in the copy handed to the analyser, the
  config is re-keyed by the names the entries use;
- a rank without a dump is evidence (a dead rank), not an error (`Missing dump files from ranks`);
- timing: the analyser ignores `time_created_ns` and `duration_ms`, which are how a straggler shows;
- gloo entries stay `scheduled` forever (no watchdog updates them), so on gloo "last completed"
  is reported as unknown instead of trusting `pg_status`.
"""
from __future__ import annotations

import ast
import copy
import io
import json
import logging
import pickle
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from snippets.nccl.evidence import Problem

STRAGGLER_MIN_S = 0.5  # arrival spread that counts as a straggler; CI noise on a loaded CPU stays well under
SIZE_FREE_OPS = ("all_to_all", "alltoall", "scatter", "send", "recv")  # input sizes may differ by rank


class DumpError(Problem):
    def __init__(self, path, problem: str, key: str | None = None, values: dict | None = None):
        super().__init__(Path(path), problem, key, values)


@dataclass
class Entry:
    rank: int
    index: int  # position in the dump's entries
    pg: str
    seq: int
    op: str  # 'all_reduce'
    profiling_name: str  # 'nccl:all_reduce'
    state: str
    input_sizes: list
    input_dtypes: list
    created_ns: int
    duration_ms: float | None
    timeout_ms: int | None
    frames: list = field(default_factory=list)

    def signature(self) -> tuple:
        if self.op.startswith(SIZE_FREE_OPS):
            return (self.op,)
        return (self.op, str(self.input_sizes), str(self.input_dtypes))

    def describe(self) -> str:
        s = f"{self.profiling_name} #{self.seq} state={self.state} input_sizes={self.input_sizes}"
        s += f" dtypes={self.input_dtypes}"
        if self.duration_ms is not None:
            s += f" duration_ms={self.duration_ms:.1f}"
        return s

    def caller(self, depth: int = 2) -> str | None:
        """The innermost stack frames outside torch: where the program called this collective."""
        mine = [f for f in self.frames if "/torch/" not in str(f.get("filename", ""))
                and not str(f.get("filename", "")).startswith("<") and "multiprocessing" not in str(f.get("filename"))]
        return " <- ".join(f"{f.get('name')} ({Path(str(f.get('filename'))).name}:{f.get('line')})"
                           for f in mine[:depth]) or None


@dataclass
class Dump:
    path: Path
    rank: int
    version: str
    comm_lib_version: str
    pg_ranks: dict[str, list[int]]  # process group name -> member ranks ([] when the dump does not say)
    last_enqueued: dict[str, int]  # from pg_status, by the same names
    entries: list[Entry]
    raw: dict

    @property
    def backend(self) -> str:
        names = {e.profiling_name.split(":")[0] for e in self.entries if ":" in e.profiling_name}
        return names.pop() if len(names) == 1 else ("nccl" if self.comm_lib_version else "gloo")

    def world(self) -> list[int]:
        """Ranks of the largest process group this dump names."""
        return max(self.pg_ranks.values(), key=len, default=[])


class _DataOnly(pickle.Unpickler):
    """Builds plain containers and scalars only: no class, function or persistent id can be named."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refers to {module}.{name}; a Flight Recorder dump holds plain data only")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refers to a persistent id; a Flight Recorder dump holds plain data only")


# What a dump may be: real ones (2000 entries of 30 stack frames) are a few MB, about 5 levels deep and
# a few hundred thousand objects. Pickle memoises, so a few hundred bytes can describe a tree of 2**60
# lists; every object is counted each time it is reached, and the walk stops at the first limit.
MAX_DUMP_BYTES = 256 << 20
MAX_DEPTH = 32
MAX_OBJECTS = 4_000_000
PLAIN = (dict, list, tuple, str, int, float, bool, type(None), bytes)


def check_plain(path: Path, raw) -> None:
    """Raise DumpError unless `raw`, walked as a tree, is plain data within MAX_DEPTH and MAX_OBJECTS."""
    stack, seen = [(raw, 1)], 0
    while stack:
        obj, depth = stack.pop()
        seen += 1
        if seen > MAX_OBJECTS:
            raise DumpError.of(path, "dump_too_many", limit=MAX_OBJECTS)
        if depth > MAX_DEPTH:
            raise DumpError.of(path, "dump_too_deep", limit=MAX_DEPTH)
        if type(obj) not in PLAIN:
            raise DumpError.of(path, "dump_not_plain", type=type(obj).__name__)
        if type(obj) is dict:
            stack.extend((x, depth + 1) for kv in obj.items() for x in kv)
        elif type(obj) in (list, tuple):
            stack.extend((x, depth + 1) for x in obj)


RANK_IN_NAME = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")


def read_raw(path: Path) -> dict:
    size = path.stat().st_size
    if size > MAX_DUMP_BYTES:
        raise DumpError.of(path, "dump_too_big", size=size, limit=MAX_DUMP_BYTES)
    data = path.read_bytes()
    if not data:
        raise DumpError(path, "empty file")
    if data[:1] == b"\x80":  # pickle protocol 2+
        try:
            raw = _DataOnly(io.BytesIO(data)).load()
        except Exception as e:  # any opcode sequence reaches here: it is data, not code, so say what broke
            raise DumpError(path, f"truncated or corrupt pickle ({type(e).__name__}: {_short(e)})") from None
    elif data.lstrip()[:1] == b"{":
        try:
            raw = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DumpError(path, f"truncated or corrupt JSON ({_short(e)})") from None
        except RecursionError:
            raise DumpError.of(path, "dump_too_deep", limit=MAX_DEPTH) from None
    else:
        raise DumpError(path, "neither a pickle nor a JSON Flight Recorder dump")
    del data
    check_plain(path, raw)
    if not isinstance(raw, dict) or "entries" not in raw or "version" not in raw:
        raise DumpError(path, "not a Flight Recorder dump: no 'version' and 'entries' keys")
    return raw


def _short(e: Exception, width: int = 200) -> str:
    text = str(e)
    return text if len(text) <= width else text[:width - 3] + "..."


def _pg_name(e: dict) -> str:
    name = (e.get("process_group") or ["", ""])[0]
    return str(name) if name != "" else f"#{e.get('pg_id', 0)}"


def _rank_list(text: str) -> list:
    try:
        return json.loads(text)  # '[0, 1, 2]'; 100x faster than literal_eval at 1024 ranks
    except json.JSONDecodeError:
        return ast.literal_eval(text)


MAX_WORLD = 1 << 18


def _pg_ranks(raw: dict, entries: list[dict]) -> dict[str, list[int]]:
    """pg_config by the names the entries use (gloo keys the default group '' instead of '0')."""
    out = {}
    for key, cfg in (raw.get("pg_config") or {}).items():
        ranks = cfg.get("ranks", "[]")
        ranks = _rank_list(ranks) if isinstance(ranks, str) else list(ranks)
        if len(ranks) > MAX_WORLD:
            raise ValueError(f"process group {key!r} of {len(ranks)} ranks, more than {MAX_WORLD}")
        out[str(key)] = [int(r) for r in ranks]
    if "" in out:
        unnamed = out.pop("")
        for e in entries:
            out.setdefault(_pg_name(e), unnamed)
    return out


MAX_SEQ = 1 << 63  # collective_seq_id is an int64


def _number(v):
    """A float or int field, or None where it is anything else (bool, text, NaN, infinity)."""
    return v if type(v) in (int, float) and v == v and abs(v) != float("inf") else None


def _entry(rank: int, index: int, e: dict) -> Entry:
    name = str(e.get("profiling_name", ""))
    seq = int(e.get("collective_seq_id", 0))
    if not 0 <= seq < MAX_SEQ:
        raise ValueError(f"collective_seq_id {seq} of entry {index} is not an int64 >= 0")
    created = int(e.get("time_created_ns") or 0)
    if not 0 <= created < MAX_SEQ:
        raise ValueError(f"time_created_ns {created} of entry {index} is not an int64 >= 0")
    return Entry(rank=rank, index=index, pg=_pg_name(e), seq=seq,
                 op=name.split(":", 1)[-1], profiling_name=name, state=str(e.get("state", "")),
                 input_sizes=e.get("input_sizes"), input_dtypes=e.get("input_dtypes"),
                 created_ns=created, duration_ms=_number(e.get("duration_ms")),
                 timeout_ms=_number(e.get("timeout_ms")), frames=[f for f in e.get("frames") or [] if type(f) is dict])


def load_dump(path) -> Dump:
    path = Path(path)
    raw = read_raw(path)
    m = RANK_IN_NAME.search(path.name)
    if not m:
        raise DumpError(path, "no rank number at the end of the file name (expected fr.<rank> or fr.<rank>.json)")
    rank = int(m[1])
    try:
        entries = [_entry(rank, i, e) for i, e in enumerate(raw["entries"]) if not e.get("is_p2p")]
        pg_ranks = _pg_ranks(raw, raw["entries"])
        status = {str(k): int(v.get("last_enqueued_collective", -1)) for k, v in (raw.get("pg_status") or {}).items()}
    except (AttributeError, TypeError, ValueError, SyntaxError, KeyError, IndexError, OverflowError, MemoryError,
            RecursionError) as e:
        raise DumpError(path, f"unexpected Flight Recorder format ({type(e).__name__}: {_short(e)})") from None
    return Dump(path, rank, str(raw["version"]), str(raw.get("comm_lib_version", "")), pg_ranks, status,
                entries, raw)


def check_same_job(dumps: list[Dump]) -> None:
    """Raise DumpError naming the first dump that cannot come from the same job as the first one."""
    if not dumps:
        return
    ref = dumps[0]
    seen: dict[int, Dump] = {}
    for d in dumps:
        if d.rank in seen:
            raise DumpError(d.path, f"a second dump for rank {d.rank} (also {seen[d.rank].path.name})")
        seen[d.rank] = d
        for what, a, b in (("dump version", d.version, ref.version),
                           ("communication library version", d.comm_lib_version, ref.comm_lib_version),
                           ("backend", d.backend, ref.backend)):
            if a != b:
                raise DumpError(d.path, f"from another job: {what} {a!r}, but {ref.path.name} has {b!r}")
        world, ref_world = d.world(), ref.world()
        if world and ref_world and len(world) != len(ref_world):
            raise DumpError(d.path, f"from another job: world of {len(world)} ranks, "
                                    f"but {ref.path.name} has {len(ref_world)}")
        if ref_world and d.rank not in ref_world:
            raise DumpError(d.path, f"rank {d.rank} is not in the job of {ref.path.name} (ranks {ref_world})")
        for pg in sorted(set(d.pg_ranks) & set(ref.pg_ranks)):
            if d.pg_ranks[pg] and ref.pg_ranks[pg] and d.pg_ranks[pg] != ref.pg_ranks[pg]:
                raise DumpError.of(d.path, "another_job_pg", pg=pg, ranks=_few(d.pg_ranks[pg]), other=ref.path.name,
                                   other_ranks=_few(ref.pg_ranks[pg]))
        _check_times(ref, d)


SAME_JOB_SLACK_S = 60.0  # clocks of two hosts may differ; more than this on top of the timeout is another run
DEFAULT_TIMEOUT_MS = 600_000  # PyTorch's NCCL default


def _check_times(ref: Dump, d: Dump) -> None:
    """The same collective (process group and number) starts on every rank of one job within the timeout:
    a rank that waited longer would have timed out. Dumps of two runs of one program disagree by minutes."""
    mine = {(e.pg, e.seq): e for e in d.entries if e.seq > 0 and e.created_ns > 0}
    for e in sorted((e for e in ref.entries if (e.pg, e.seq) in mine), key=lambda e: e.seq):
        o = mine[(e.pg, e.seq)]
        limit = max(e.timeout_ms or DEFAULT_TIMEOUT_MS, o.timeout_ms or DEFAULT_TIMEOUT_MS) / 1e3 + SAME_JOB_SLACK_S
        gap = abs(e.created_ns - o.created_ns) / 1e9
        if gap > limit:
            raise DumpError.of(d.path, "another_job_time", seq=e.seq, pg=e.pg, gap=gap, other=ref.path.name,
                               limit=limit)
        return  # the oldest collective both kept says it; later ones may drift by up to the timeout each


def _few(ranks: list[int], n: int = 8) -> str:
    return str(ranks) if len(ranks) <= n else f"{str(ranks[:n])[:-1]}, ... ({len(ranks)} ranks)]"


@dataclass
class Divergence:
    pg: str
    seq: int
    kind: str  # 'missing' | 'mismatch'
    culprits: list[int]
    op: str  # what the other ranks called
    at: dict[int, Entry | None]  # each member rank's entry at `seq` (None: it has none)
    detail: str


@dataclass
class Straggle:
    pg: str
    seq: int
    op: str
    late_s: dict[int, float]  # seconds after the first rank that reached `seq`
    culprits: list[int]
    at: dict[int, Entry]


@dataclass
class Alignment:
    ranks: list[int]  # ranks with a dump
    members: dict[str, list[int]]  # process group -> dumped ranks that belong to it
    last_enqueued: dict[str, dict[int, int]]
    last_completed: dict[str, dict[int, int | None]]  # None where the backend never marks completion
    divergence: Divergence | None
    straggle: Straggle | None


def _by_pg(dumps: list[Dump]) -> dict[str, dict[int, dict[int, Entry]]]:
    out: dict[str, dict[int, dict[int, Entry]]] = {}
    for d in dumps:
        for pg, ranks in d.pg_ranks.items():
            if d.rank in ranks:
                out.setdefault(pg, {}).setdefault(d.rank, {})
        for e in d.entries:
            if e.seq > 0:
                out.setdefault(e.pg, {}).setdefault(d.rank, {})[e.seq] = e
    return out


def _reference(groups: dict[tuple, list[int]]) -> tuple:
    """The signature most ranks share; on a tie, the one of the lowest rank (as torchfrtrace does)."""
    return max(groups, key=lambda s: (len(groups[s]), -min(groups[s])))


def first_divergence(pg: str, seqs: dict[int, dict[int, Entry]]) -> Divergence | None:
    members = sorted(seqs)
    start = max((min(s) for s in seqs.values() if s), default=1)  # older entries fell out of some ring buffer
    # the numbers some rank kept, in order: a number no rank kept is a gap (e.g. the DETAIL wrapper's helper
    # group), and walking the range instead would take forever after one corrupt id of 10**12
    for seq in sorted({q for s in seqs.values() for q in s if q >= start}):
        at = {r: seqs[r].get(seq) for r in members}
        present = {r: e for r, e in at.items() if e is not None}
        ops = Counter(e.op for e in present.values())
        if len(present) < len(members):
            missing = [r for r in members if at[r] is None]
            return Divergence(pg, seq, "missing", missing, ops.most_common(1)[0][0], at,
                              f"ranks {missing} have no collective #{seq}")
        groups: dict[tuple, list[int]] = {}
        for r, e in present.items():
            groups.setdefault(e.signature(), []).append(r)
        if len(groups) > 1:
            ref = _reference(groups)
            culprits = sorted(r for s, rs in groups.items() if s != ref for r in rs)
            detail = " vs ".join(f"rank {rs[0] if len(rs) == 1 else rs}: {present[rs[0]].op} "
                                 f"{present[rs[0]].input_sizes} {present[rs[0]].input_dtypes}"
                                 for rs in groups.values())
            return Divergence(pg, seq, "mismatch", culprits, present[groups[ref][0]].op, at, detail)
    return None


def worst_arrival(pg: str, seqs: dict[int, dict[int, Entry]], until: int | None) -> Straggle | None:
    """The collective where a rank first arrived late.

    On NCCL the host does not wait for a collective to finish, so the late rank's lag carries over to
    every later collective with the same spread: the root is the first one that shows (nearly) the
    largest spread, not the one with the largest spread.
    """
    members = sorted(seqs)
    common = set.intersection(*(set(s) for s in seqs.values())) if len(members) > 1 else set()
    spreads = {}
    for seq in sorted(common):
        if until is not None and seq >= until:
            break
        at = {r: seqs[r][seq] for r in members}
        first = min(e.created_ns for e in at.values())
        spreads[seq] = (at, {r: (e.created_ns - first) / 1e9 for r, e in at.items()})
    if not spreads:
        return None
    widest = max(max(late.values()) for _, late in spreads.values())
    if widest < STRAGGLER_MIN_S:
        return None
    for seq, (at, late) in spreads.items():
        spread = max(late.values())
        if spread >= 0.8 * widest:
            culprits = sorted(r for r, s in late.items() if s >= spread / 2)
            return Straggle(pg, seq, at[members[0]].op, late, culprits, at)
    return None


def align(dumps: list[Dump]) -> Alignment:
    by_pg = _by_pg(dumps)
    divergences, straggles = [], []
    last_enq, last_done = {}, {}
    for pg, seqs in by_pg.items():
        last_enq[pg] = {r: max(s, default=0) for r, s in seqs.items()}
        last_done[pg] = {r: (max((q for q, e in s.items() if e.state == "completed"), default=0)
                             if any(e.state != "scheduled" for e in s.values()) else None)
                         for r, s in seqs.items()}
        div = first_divergence(pg, seqs)
        if div:
            divergences.append(div)
        st = worst_arrival(pg, seqs, div.seq if div else None)
        if st:
            straggles.append(st)

    def when(d: Divergence) -> int:  # the first thing that went wrong, across process groups
        return min((e.created_ns for e in d.at.values() if e is not None), default=0)

    return Alignment(
        ranks=sorted(d.rank for d in dumps),
        members={pg: sorted(s) for pg, s in by_pg.items()},
        last_enqueued=last_enq, last_completed=last_done,
        divergence=min(divergences, key=when, default=None),
        straggle=max(straggles, key=lambda s: max(s.late_s.values()), default=None),
    )


def pending(dumps: list[Dump]) -> Entry | None:
    """The newest collective of the ranks that have dumps: where survivors of a dead rank wait."""
    entries = [e for d in dumps for e in d.entries if e.seq > 0]
    return max(entries, key=lambda e: (e.seq, e.created_ns), default=None)


@dataclass
class TorchReport:
    lines: list[str]  # what torchfrtrace would print
    seq: int | None = None
    collective: str | None = None
    missing_ranks: list[int] = field(default_factory=list)
    culprits: list[int] = field(default_factory=list)  # ranks named in its mismatch errors
    failure: str | None = None  # why it could not run


def _analyser_input(dumps: list[Dump]) -> dict:
    details = {}
    known = sorted(d.rank for d in dumps)
    for d in dumps:
        cfg = copy.deepcopy(d.raw.get("pg_config") or {})
        template = cfg.pop("", None)
        for e in d.raw["entries"]:
            name, desc = (list(e.get("process_group") or ["", ""]) + [""])[:2]
            if name not in cfg and template is not None:
                cfg[name] = dict(template, name=name, desc=desc)
        for c in cfg.values():
            if c.get("ranks") in ("[]", []):
                c["ranks"] = str(known)
        details[d.path.name] = {"host_name": f"host_rank{d.rank}", "rank": d.rank, "version": d.version,
                                "entries": copy.deepcopy(d.raw["entries"]), "pg_config": cfg}
    return details


def pytorch_report(dumps: list[Dump]) -> TorchReport:
    """Run PyTorch's own Flight Recorder analyser (the code behind `torchfrtrace`) on the dumps."""
    from argparse import Namespace

    try:
        from torch.distributed.flight_recorder.components.fr_logger import FlightRecorderLogger
    except ImportError as e:
        return TorchReport([], failure=f"not available in this torch ({e})")
    log = FlightRecorderLogger().logger
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    saved = log.handlers[:], log.propagate
    log.handlers, log.propagate = [handler], False
    try:
        from torch.distributed.flight_recorder.components.builder import build_db

        args = Namespace(verbose=False, just_print_entries=False, allow_incomplete_ranks=True, mismatch_cap=10,
                         selected_ranks=None, pg_filters=None, print_stack_trace=False)
        db = build_db(_analyser_input(dumps), args, dumps[0].version)
    except Exception as e:  # third-party code at a boundary: report how it failed, do not crash the doctor
        return TorchReport(_lines(buf), failure=f"{type(e).__name__}: {e}")
    finally:
        log.handlers, log.propagate = saved
    report = TorchReport(_lines(buf))
    bad = next((c for c in db.collectives if not c.pass_check or c.missing_ranks), None)
    if bad:
        report.seq, report.collective = bad.collective_seq_id, bad.collective_name
        report.missing_ranks = sorted(bad.missing_ranks or [])
        report.culprits = sorted(bad.mismatch_collectives or {})
    return report


def _lines(buf: io.StringIO) -> list[str]:
    skip = ("tabulate is not installed",)
    return [ln for ln in buf.getvalue().splitlines() if ln.strip() and not ln.startswith(skip)]

