"""Record a lab's published numbers: the only way a notebook reports a metric.

Under IPython each metric is also displayed as an `application/vnd.kb.metric+json` output, the exact
value that kb/results.py compares the result's JSON with. `make gpu-run` sets KB_RECORD_PATH; each call rewrites that file with every metric and table so
far and the snippet files the kernel has imported (they become the result's `inputs`). Without
the variable (smoke runs, Colab) the values are only shown.
"""
from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_state: dict = {"metrics": {}, "labels": {}, "tables": {}}


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"metric/table name {name!r} must be snake_case ([a-z][a-z0-9_]*)")


def metric(name: str, value: float, unit: str, zh: str, en: str) -> float:
    """Record one number with its unit and its label in both languages."""
    _check_name(name)
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"metric {name!r} is not finite: {value}")
    _state["metrics"][name] = value
    _state["labels"][name] = {"unit": unit, "zh": zh, "en": en}
    _flush()
    _show(name, value, unit, f"{en}: {value:.4g} {unit}")
    return value


def _show(name: str, value: float, unit: str, line: str) -> None:
    """The printed line; in a notebook also an exact machine-readable record of the metric, which
    kb/results.py checks every published metric against."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    if shell is None:
        print(line)
        return
    from IPython.display import display

    display({"application/vnd.kb.metric+json": {"name": name, "value": value, "unit": unit},
             "text/plain": line}, raw=True)


def table(name: str, columns: list[str], rows: list[list], zh: str, en: str) -> None:
    """Record a table (a curve over sizes, say): column names, then rows of numbers or strings."""
    _check_name(name)
    if any(len(r) != len(columns) for r in rows):
        raise ValueError(f"table {name!r}: every row needs {len(columns)} cells")
    clean = [[float(v) if isinstance(v, (int, float)) else str(v) for v in r] for r in rows]
    if any(isinstance(v, float) and not math.isfinite(v) for r in clean for v in r):
        raise ValueError(f"table {name!r} holds a value that is not finite")
    _state["tables"][name] = {"columns": list(columns), "rows": clean, "zh": zh, "en": en}
    _flush()


def snippet_files() -> list[str]:
    """Repository-relative paths of every snippets/ module imported so far."""
    snippets = ROOT / "snippets"
    found = set()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if f and Path(f).resolve().is_relative_to(snippets):
            found.add(Path(f).resolve().relative_to(ROOT).as_posix())
    return sorted(found)


def finish() -> None:
    """Write the record one last time, after every snippet the notebook uses is imported."""
    _flush()


def _flush() -> None:
    path = os.environ.get("KB_RECORD_PATH")
    if not path:
        return
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps({**_state, "modules": snippet_files()}, indent=1, ensure_ascii=False))
    tmp.replace(path)
