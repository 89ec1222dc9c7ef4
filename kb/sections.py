"""Named snippet sections earn their place: each is included on a page, and is short enough to read there.

A section is the code between `--8<-- [start:NAME]` and `--8<-- [end:NAME]` in a file under snippets/;
a page includes it with `--8<-- "path/file.py:NAME"`. Longer code is linked, not pasted.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 40
_START = re.compile(r"--8<-- \[start:([\w-]+)\]")
_END = re.compile(r"--8<-- \[end:([\w-]+)\]")
_INCLUDE = re.compile(r'--8<-- "([^":]+):([\w-]+)"')


def sections(root: Path = ROOT) -> dict[tuple[str, str], int]:
    """(file relative to snippets/, section name) -> number of lines in it."""
    found = {}
    for path in sorted((root / "snippets").rglob("*")):
        if not path.is_file() or path.suffix not in {".py", ".cu", ".cuh", ".h", ".cpp"}:
            continue
        rel = path.relative_to(root / "snippets").as_posix()
        open_at: dict[str, int] = {}
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
            if m := _START.search(line):
                open_at[m.group(1)] = i
            elif (m := _END.search(line)) and m.group(1) in open_at:
                found[(rel, m.group(1))] = i - open_at.pop(m.group(1)) - 1
        if open_at:
            raise ValueError(f"snippets/{rel}: section(s) {sorted(open_at)} are never closed with [end:NAME]")
    return found


def includes(root: Path = ROOT) -> dict[tuple[str, str], list[str]]:
    """(file, section) -> the pages that include it."""
    used: dict[tuple[str, str], list[str]] = {}
    for page in sorted((root / "docs").rglob("*.md")):
        for m in _INCLUDE.finditer(page.read_text(encoding="utf-8")):
            path = m.group(1).removeprefix("snippets/")
            if not (root / "snippets" / path).is_file():
                continue  # a section of a file outside snippets/ (CONTRIBUTING.md's language halves)
            used.setdefault((path, m.group(2)), []).append(page.relative_to(root).as_posix())
    return used


def problems(root: Path = ROOT) -> list[str]:
    defined, used = sections(root), includes(root)
    out = [f"snippets/{f}: section '{s}' is included on no page: include it or remove its markers"
           for (f, s) in defined if (f, s) not in used]
    out += [f"snippets/{f}: section '{s}' has {n} lines, more than {MAX_LINES}, and is pasted into "
            f"{', '.join(used[(f, s)])}: show a shorter piece and link the file" for (f, s), n in defined.items()
            if (f, s) in used and n > MAX_LINES]
    out += [f"{pages[0]}: includes snippets/{f}:{s}, which is not a section there" for (f, s), pages in used.items()
            if (f, s) not in defined]
    return out
