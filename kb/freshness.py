"""Freshness of the labs' GPU results, and the publishing gate built on it.

A result that verifies (kb/results.py) is in one of three states: fresh (its inputs are today's files),
stale (an input changed since the run) or legacy (recorded before commits were kept); a lab with no
result is missing. Stale is a state, not a failure: the site shows such numbers flagged in place and
`make check` lists them. Publishing is where freshness is a condition:

    python -m kb.freshness --report          the stale labs, what made each stale, how to re-record them
    python -m kb.freshness --publish-check   fail if a published page shows a stale, legacy or missing number

A page shows a lab's numbers where it quotes one (`<!-- metric LAB NAME -->`), where its lab cards list the
lab's metrics (`<!-- lab-cards -->`, `<!-- lab-index -->`), and on the lab's own page (a published lab).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kb import markers
from kb.labs import ROOT, LabError, lab_meta, rel
from kb.pages import is_question, split_front_matter
from kb.results import DEFAULT_GPU, Result, result_for

RERECORD = "make gpu-run STALE=1"


@dataclass
class LabState:
    notebook: str                     # notebooks/NN-x.ipynb
    state: str                        # fresh | stale | legacy | missing | unverified
    gpus: int                         # GPUs the lab needs (metadata.kb.requires.gpus)
    published: bool
    result: Result | None = None
    why: str = ""                     # for unverified: the verification error
    changed: list[str] = field(default_factory=list)

    @property
    def stem(self) -> str:
        return Path(self.notebook).stem

    @property
    def publishable(self) -> bool:
        return self.state == "fresh"


def state_of(notebook: str, gpu: str | None = None) -> LabState:
    meta = lab_meta(ROOT / notebook)
    try:
        result = result_for(notebook, gpu)
    except LabError as e:
        return LabState(notebook, "unverified", meta.gpus, meta.published, why=str(e))
    if result is None:
        return LabState(notebook, "missing", meta.gpus, meta.published)
    state = "stale" if not result.fresh else "legacy" if result.legacy else "fresh"
    return LabState(notebook, state, meta.gpus, meta.published, result, changed=list(result.stale))


def lab_states(gpu: str | None = None) -> list[LabState]:
    """Every lab under notebooks/, in order, with the state of its result on that GPU (default DEFAULT_GPU)."""
    return [state_of(rel(p), gpu) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]


@dataclass(frozen=True)
class Shown:
    """One place a page shows a lab's recorded numbers."""
    page: str        # docs/...
    line: int
    lab: str         # notebooks/NN-x.ipynb
    what: str        # the metric's name, or 'lab card'
    gpu: str | None


def _page_meta(text: str, where: str) -> dict:
    if not text.startswith("---\n"):
        return {}
    meta, _ = split_front_matter(text, where)
    return meta


def shown(docs: Path | None = None) -> list[Shown]:
    """Every place a page under docs/ shows a lab's recorded numbers (module docstring)."""
    docs = docs or ROOT / "docs"
    every = [rel(p) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    found = []
    for path in sorted(docs.rglob("*.md")):
        where = "docs/" + path.relative_to(docs).as_posix()
        text = path.read_text(encoding="utf-8")
        meta = _page_meta(text, where)
        gpu = meta.get("gpu")
        question = is_question(path.relative_to(docs).as_posix())
        for m in markers.find(text, where):
            if m.name == "metric":
                found.append(Shown(where, m.line, m.lab, m.args[1], m.options.get("gpu", gpu)))
            elif m.name in ("lab-cards", "lab-index"):
                labs = (meta.get("labs") or [] if question else []) if m.name == "lab-cards" else every
                found += [Shown(where, m.line, lab, "lab card", None) for lab in labs]
    return found


def quote_counts(docs: Path | None = None) -> Counter:
    """How many numbers each lab has quoted across the pages (lab cards not counted)."""
    return Counter(s.lab for s in shown(docs) if s.what != "lab card")


def _describe(s: LabState) -> str:
    if s.state == "stale":
        also = "; also recorded before commits were kept" if s.result and s.result.legacy else ""
        return f"stale (changed since the run: {', '.join(s.changed[:4])}{' …' if len(s.changed) > 4 else ''}{also})"
    if s.state == "legacy":
        return "legacy (recorded before commits were kept)"
    if s.state == "missing":
        return "missing (no GPU result)"
    return f"unverified ({s.why})"


def publish_problems(docs: Path | None = None) -> list[str]:
    """One line for every place a published page would show a number that is not fresh, then one line for
    each lab involved saying why its result is not fresh."""
    states: dict[tuple[str, str | None], LabState] = {}

    def state(lab: str, gpu: str | None) -> LabState:
        if (lab, gpu) not in states:
            states[(lab, gpu)] = state_of(lab, gpu)
        return states[(lab, gpu)]

    found, behind = [], {}
    for s in shown(docs):
        if not (ROOT / s.lab).is_file():
            found.append(f"{s.page}:{s.line}: shows {s.what} of {s.lab}, which does not exist")
            continue
        st = state(s.lab, s.gpu)
        if not st.publishable:
            what = "its lab card shows" if s.what == "lab card" else f"quotes {s.what} from"
            found.append(f"{s.page}:{s.line}: {what} {st.stem} ({st.state}, {s.gpu or DEFAULT_GPU})")
            behind[(st.stem, s.gpu or DEFAULT_GPU)] = st
    for st in lab_states():
        if st.published and not st.publishable:
            found.append(f"docs/labs/{st.stem}.ipynb: the lab page shows {st.stem} ({st.state}, {DEFAULT_GPU})")
            behind[(st.stem, DEFAULT_GPU)] = st
    return found + [f"{stem} on {gpu}: {_describe(st)}" for (stem, gpu), st in sorted(behind.items())]


def report(docs: Path | None = None) -> str:
    """The short list `make check` ends with: each lab whose result is not fresh, why, and how to re-record."""
    counts = quote_counts(docs)
    behind = [s for s in lab_states() if not s.publishable]
    if not behind:
        return "GPU results: every lab's result is fresh."
    lines = [f"GPU results not fresh ({len(behind)} of {len(lab_states())} labs); the site flags their numbers, "
             "and `make publish-check` refuses them until they are re-recorded:"]
    for s in behind:
        needs = f", needs {s.gpus} GPUs" if s.gpus > 1 else ""
        lines.append(f"  {s.stem} ({counts[s.notebook]} quotes{needs}): {_describe(s)}")
    lines.append(f"Re-record on a GPU machine: {RERECORD} [BUDGET_S=1500]  (or make gpu-run NOTEBOOKS=<notebook>)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Freshness of the labs' GPU results (kb/freshness.py).")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--report", action="store_true", help="list the labs whose results are not fresh")
    group.add_argument("--publish-check", action="store_true",
                       help="fail if any published page shows a stale, legacy or missing number")
    args = ap.parse_args(argv)
    if args.report:
        print(report())
        return 0
    problems = publish_problems()
    if problems:
        print(f"publish-check: {len(problems)} place(s) would publish a number that is not fresh:", file=sys.stderr)
        for line in problems:
            print("  " + line, file=sys.stderr)
        print(f"publish-check: re-record them on a GPU machine ({RERECORD}), then commit results/", file=sys.stderr)
        return 1
    print("publish-check: every number the site shows comes from a fresh GPU result")
    return 0


if __name__ == "__main__":
    sys.exit(main())
