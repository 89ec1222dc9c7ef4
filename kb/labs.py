"""Lab notebooks: metadata, hardware needs, Colab links (results: kb/results.py).

One module that hooks, tests and `kb/gpu_run.py` share, so the site, the checks and the runner
agree on what a lab needs. It imports nothing from torch or snippets, and mkdocs only when a link is made.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class LabError(ValueError):
    """A lab file (notebook or result) breaks its contract; the message names the file."""


def rel(path: Path) -> str:
    path = Path(path).resolve()
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_notebook(path: Path) -> dict:
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LabError(f"{rel(path)}: not a readable notebook: {e}") from e
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise LabError(f"{rel(path)}: not a notebook (no 'cells' list)")
    return nb


@dataclass
class LabMeta:
    title_en: str
    gpus: int
    capability: str | None
    smoke_budget_s: float
    published: bool


def lab_meta(path: Path, nb: dict | None = None) -> LabMeta:
    """The `kb` block of a notebook's metadata, checked."""
    nb = nb if nb is not None else read_notebook(path)
    kb = nb.get("metadata", {}).get("kb")
    where = f"{rel(path)}: metadata.kb"
    if not isinstance(kb, dict):
        raise LabError(f"{where} is missing (title_en, requires, smoke_budget_s, published)")
    req = kb.get("requires")
    if not isinstance(req, dict) or not isinstance(req.get("gpus"), int) or req["gpus"] < 0:
        raise LabError(f"{where}.requires.gpus must be an integer >= 0")
    cap = req.get("capability")
    if cap is not None and not (isinstance(cap, str) and cap.replace(".", "", 1).rstrip("a").isdigit()):
        raise LabError(f"{where}.requires.capability must be null or like '8.0' or '9.0a', not {cap!r}")
    budget = kb.get("smoke_budget_s")
    if not isinstance(budget, (int, float)) or budget <= 0:
        raise LabError(f"{where}.smoke_budget_s must be a positive number of seconds")
    if not isinstance(kb.get("published"), bool):
        raise LabError(f"{where}.published must be true or false")
    if not isinstance(kb.get("title_en"), str) or not kb["title_en"]:
        raise LabError(f"{where}.title_en must be a non-empty string")
    return LabMeta(kb["title_en"], req["gpus"], cap, float(budget), kb["published"])


def title_zh(nb: dict) -> str:
    """The notebook's H1, which mkdocs-jupyter also uses as the page title."""
    for cell in nb["cells"]:
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


@functools.cache
def mkdocs_config():
    """mkdocs.yml as MkDocs itself reads it (its loader, its defaults, its !relative tags)."""
    from mkdocs.config import load_config
    try:
        return load_config(str(ROOT / "mkdocs.yml"))
    except Exception as e:  # MkDocs raises its own ConfigurationError and YAML errors
        raise LabError(f"mkdocs.yml: {e}") from e


def mkdocs_value(key: str) -> str:
    """A top-level value of mkdocs.yml."""
    value = mkdocs_config().get(key)
    if not value:
        raise LabError(f"mkdocs.yml: no top-level '{key}'")
    return str(value)


def colab_url(notebook: str) -> str:
    """Colab link for notebooks/<name>.ipynb, derived from repo_url and edit_uri's branch."""
    repo = mkdocs_value("repo_url").rstrip("/")
    prefix = "https://github.com/"
    if not repo.startswith(prefix):
        raise LabError(f"mkdocs.yml: repo_url {repo!r} is not a GitHub repository; Colab cannot open it")
    branch = mkdocs_value("edit_uri").split("/")[1]
    return f"https://colab.research.google.com/github/{repo[len(prefix):]}/blob/{branch}/{notebook}"


def capability_ok(have: tuple[int, int] | None, need: str | None) -> bool:
    """need: None, '8.0', '9.0a' ('a' = the arch-specific features of exactly that chip); a copy of
    snippets.common.hardware.capability_ok, since kb does not import snippets."""
    if need is None:
        return True
    if have is None:
        return False
    major, minor = (int(x) for x in need.rstrip("a").split("."))
    return have == (major, minor) if need.endswith("a") else have >= (major, minor)


def unmet_needs(meta: LabMeta, count: int, capability: str | None) -> str | None:
    """Why a machine with `count` GPUs of `capability` ('9.0', None without a GPU) cannot run a lab, or None."""
    if count < meta.gpus:
        return f"needs {meta.gpus} GPU(s) (metadata.kb.requires.gpus), this machine has {count}"
    have = tuple(int(x) for x in capability.split(".")) if capability else None
    if not capability_ok(have, meta.capability):
        shown = "no GPU" if have is None else f"sm_{have[0]}{have[1]}"
        return f"needs sm_{meta.capability.replace('.', '')} (metadata.kb.requires.capability), this machine has {shown}"
    return None


PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}  # cell magics whose body is Python


def imported_modules(source: str) -> set[str]:
    """Modules of snippets/ that Python source imports (`from snippets.a import b` gives a and a.b, since b
    may be a module), read from its syntax tree; IPython magics and shell lines are skipped."""
    lines = source.splitlines()
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    if first.startswith("%%") and first[2:].split(" ")[0] not in PYTHON_CELL_MAGICS:
        return set()  # %%bash, %%writefile, %%html, ...: the cell is not Python
    code = "\n".join(ln for ln in lines if not ln.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError) as e:
        raise LabError(f"a code cell is not Python ({e}): {first[:60]!r}") from e
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "snippets"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "snippets":
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def notebook_modules(notebook: Path) -> set[str]:
    """The snippet modules a lab notebook imports directly."""
    nb = read_notebook(notebook)
    found = set()
    for i, c in enumerate(nb["cells"]):
        if c.get("cell_type") == "code":
            try:
                found |= imported_modules("".join(c.get("source", "")))
            except LabError as e:
                raise LabError(f"{rel(notebook)}: cell {i}: {e}") from None
    return found


@functools.lru_cache(maxsize=64)
def _notebook_modules(path: str, mtime_ns: int) -> frozenset:
    return frozenset(notebook_modules(Path(path)))


def module_file(module: str) -> str | None:
    """snippets.a.b -> snippets/a/b.py or snippets/a/b/__init__.py, None for a name that is not a module."""
    base = module.replace(".", "/")
    return next((p for p in (f"{base}.py", f"{base}/__init__.py") if (ROOT / p).is_file()), None)


@functools.lru_cache(maxsize=512)
def _file_modules(path: str, mtime_ns: int) -> frozenset:
    """imported_modules of one file, parsed once per version of it."""
    return frozenset(imported_modules(Path(path).read_text(encoding="utf-8")))


def snippet_closure(notebook: Path) -> set[str]:
    """Every snippets/ file a notebook imports, directly or through other snippets, with their packages'
    __init__.py: what a run of it must record among its inputs."""
    nb = Path(notebook)
    todo, files = list(_notebook_modules(str(nb), nb.stat().st_mtime_ns)), set()
    while todo:
        module = todo.pop()
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            f = module_file(".".join(parts[:i]))
            if f and f not in files:
                files.add(f)
                todo += _file_modules(str(ROOT / f), (ROOT / f).stat().st_mtime_ns)
    return files
