"""When a file last changed, from git; nothing where the checkout has no history to tell."""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path


@functools.cache
def _history(cwd: str) -> bool:
    """True when `cwd` is in a git work tree with its full history (not a shallow clone)."""
    try:
        r = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=cwd, capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and r.stdout.strip() == "false"


def last_change(paths: list[str | Path]) -> str | None:
    """YYYY-MM-DD of the last commit that touched any of `paths` (all in one repository), or None when
    git is missing, the files are not in a repository with full history, or no commit touched them."""
    paths = [Path(p).resolve() for p in paths if p]
    if not paths:
        return None
    cwd = str(paths[0].parent)
    if not _history(cwd):
        return None
    try:
        r = subprocess.run(["git", "log", "-1", "--format=%cs", "--", *map(str, paths)], cwd=cwd,
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    date = r.stdout.strip()
    return date if r.returncode == 0 and len(date) == 10 else None
