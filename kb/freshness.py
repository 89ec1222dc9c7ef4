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
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kb import markers
from kb.labs import ROOT, LabError, lab_meta, rel
from kb.pages import is_question
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


MARKDOWN = (".md", ".markdown", ".mdown", ".mkdn", ".mkd")  # what MkDocs renders as a page
_RESULT_INCLUDE = re.compile(r'--8<--\s+"?(results/[^":\s]+)')  # a results/<gpu>/<stem>.* file included as text


class FreshnessError(LabError):
    """A page cannot be read for what it shows; the message names the file."""


def _front_matter(text: str, where: str) -> tuple[dict, str]:
    """(meta, body) as MkDocs reads them (YAML or MultiMarkdown front matter), the body padded with blank
    lines so that line numbers stay those of the file; without MkDocs (a GPU machine), YAML front matter only."""
    try:
        from mkdocs.utils.meta import get_data
    except ImportError:
        def get_data(doc):
            m = re.match(r"^-{3}[ \t]*\n(.*?\n)(?:\.{3}|-{3})[ \t]*\n", doc, re.S)
            return (doc[m.end():], yaml.safe_load(m.group(1)) or {}) if m else (doc, {})
    try:
        body, meta = get_data(text)
    except Exception as e:  # MkDocs raises YAML's errors
        raise FreshnessError(f"{where}: front matter is not readable: {e}") from e
    if not isinstance(meta, dict):
        raise FreshnessError(f"{where}: front matter must be a mapping")
    gpu = meta.get("gpu")
    if gpu is not None and not (isinstance(gpu, str) and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", gpu)):
        raise FreshnessError(f"{where}: front matter gpu = {gpu!r}: it names a results/ folder, like nvidia-h200")
    head = text[:len(text) - len(body)] if text.endswith(body) else ""
    return meta, "\n" * head.count("\n") + body


def pages(docs: Path) -> list[Path]:
    """Every file MkDocs renders as a page under docs/, through symbolic links too (docs/labs is one)."""
    found = []
    for folder, _dirs, files in os.walk(docs, followlinks=True):
        found += [Path(folder) / f for f in files if f.endswith(MARKDOWN)]
    return sorted(found)


def shown(docs: Path | None = None) -> list[Shown]:
    """Every place a page under docs/ shows a lab's recorded numbers (module docstring)."""
    docs = docs or ROOT / "docs"
    every = [rel(p) for p in sorted((ROOT / "notebooks").glob("*.ipynb"))]
    found = []
    for path in pages(docs):
        uri = path.relative_to(docs).as_posix()
        where = f"docs/{uri}"
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as e:
            raise FreshnessError(f"{where}: not readable as UTF-8 text: {e}") from e
        meta, body = _front_matter(text, where)
        gpu, question = meta.get("gpu"), is_question(uri)
        try:
            found_markers = markers.find(body, where)
        except markers.MarkerError as e:
            raise FreshnessError(str(e)) from e
        for inc in _RESULT_INCLUDE.finditer(body):  # raw result data pasted in by pymdownx.snippets
            line = body.count("\n", 0, inc.start()) + 1
            stem = Path(inc.group(1)).stem
            found.append(Shown(where, line, f"notebooks/{stem}.ipynb", "included result file",
                               Path(inc.group(1)).parent.name or None))
        for m in found_markers:
            if m.name == "metric":
                found.append(Shown(where, m.line, m.lab, m.args[1], m.options.get("gpu", gpu)))
            elif m.name in ("lab-cards", "lab-index"):
                labs = (meta.get("labs") or [] if question else []) if m.name == "lab-cards" else every
                found += [Shown(where, m.line, str(lab), "lab card", None) for lab in labs]
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
            what = {"lab card": "its lab card shows", "included result file": "includes the result file of"}.get(
                s.what, f"quotes {s.what} from")
            found.append(f"{s.page}:{s.line}: {what} {st.stem} ({st.state}, {s.gpu or DEFAULT_GPU})")
            behind[(st.stem, s.gpu or DEFAULT_GPU)] = st
    for st in lab_states():  # every lab's page is built; it shows its result, or says there is none
        if st.state in ("stale", "legacy", "unverified") or (st.published and st.state == "missing"):
            found.append(f"docs/labs/{st.stem}.ipynb: the lab page shows {st.stem} ({st.state}, {DEFAULT_GPU})")
            behind[(st.stem, DEFAULT_GPU)] = st
    return found + [f"{stem} on {gpu}: {_describe(st)}" for (stem, gpu), st in sorted(behind.items())]


def report(docs: Path | None = None) -> str:
    """The short list `make check` ends with: each lab whose result is not fresh, why, and how to re-record."""
    places = shown(docs)
    counts = Counter(s.lab for s in places if s.what != "lab card")
    others = sorted({(s.lab, s.gpu) for s in places if s.gpu and s.gpu != DEFAULT_GPU and (ROOT / s.lab).is_file()})
    every = lab_states()
    behind = [(s, DEFAULT_GPU) for s in every if not s.publishable]
    behind += [(st, gpu) for lab, gpu in others if not (st := state_of(lab, gpu)).publishable]
    if not behind:
        return "GPU results: every lab's result is fresh."
    lines = [f"GPU results not fresh ({len(behind)}; {len(every)} labs): the site flags their numbers, "
             "and `make publish-check` refuses them until they are re-recorded:"]
    for s, gpu in behind:
        needs = f", needs {s.gpus} GPUs" if s.gpus > 1 else ""
        lines.append(f"  {s.stem} on {gpu} ({counts[s.notebook]} quotes{needs}): {_describe(s)}")
    lines.append(f"Re-record on a GPU machine: {RERECORD} [BUDGET_S=1500]  (or make gpu-run NOTEBOOKS=<notebook>)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Freshness of the labs' GPU results (kb/freshness.py).")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--report", action="store_true", help="list the labs whose results are not fresh")
    group.add_argument("--publish-check", action="store_true",
                       help="fail if any published page shows a stale, legacy or missing number")
    args = ap.parse_args(argv)
    try:
        text = report() if args.report else None
        problems = [] if args.report else publish_problems()
    except LabError as e:  # a page, notebook or result that cannot be read: named, never a traceback
        print(f"freshness: {e}", file=sys.stderr)
        return 2
    if args.report:
        print(text)
        return 0
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
