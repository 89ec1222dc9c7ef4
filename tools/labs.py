"""Lab notebooks and their GPU results: metadata, freshness, Colab links.

One module that hooks, tests and `tools/gpu_run.py` share, so the site, the checks and the runner
agree on what a lab needs and whether its published numbers still match its code.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

ROOT = Path(__file__).resolve().parents[1]
RESULT_SCHEMA = json.loads((ROOT / "schemas/result.schema.json").read_text(encoding="utf-8"))


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


def hardware_needs(meta: LabMeta, lang: str) -> list[str]:
    zh = lang == "zh"
    needs = []
    if meta.capability:
        arch = "sm_" + meta.capability.replace(".", "")
        needs.append(f"需要 {arch}" if zh else f"needs {arch}")
    if meta.gpus >= 1:
        gpus = f"{meta.gpus} 块 GPU" if zh else (f"{meta.gpus} GPUs" if meta.gpus > 1 else "1 GPU")
        needs.append(f"需要 {gpus}（CPU 上为冒烟规模）" if zh else f"needs {gpus} (smoke size on CPU)")
    else:
        needs.append("CPU 即可" if zh else "runs on CPU")
    return needs


def mkdocs_value(key: str) -> str:
    """A plain top-level value of mkdocs.yml (the file has !relative tags, so no yaml.safe_load)."""
    for line in (ROOT / "mkdocs.yml").read_text(encoding="utf-8").splitlines():
        if line.startswith(f"{key}:"):
            return line.split(":", 1)[1].strip()
    raise LabError(f"mkdocs.yml: no top-level '{key}'")


def colab_url(notebook: str) -> str:
    """Colab link for notebooks/<name>.ipynb, derived from repo_url and edit_uri's branch."""
    repo = mkdocs_value("repo_url").rstrip("/")
    prefix = "https://github.com/"
    if not repo.startswith(prefix):
        raise LabError(f"mkdocs.yml: repo_url {repo!r} is not a GitHub repository; Colab cannot open it")
    branch = mkdocs_value("edit_uri").split("/")[1]
    return f"https://colab.research.google.com/github/{repo[len(prefix):]}/blob/{branch}/{notebook}"


@dataclass
class Result:
    path: Path
    data: dict
    stale: list[str] = field(default_factory=list)

    @property
    def fresh(self) -> bool:
        return not self.stale

    @property
    def notebook_path(self) -> Path:
        return self.path.with_suffix(".ipynb")


def load_result(path: Path) -> Result:
    """Read and check one results/<slug>/<stem>.json, and work out whether it is fresh."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LabError(f"{rel(path)}: not readable JSON: {e}") from e
    try:
        jsonschema.validate(data, RESULT_SCHEMA)
    except jsonschema.ValidationError as e:
        at = "/".join(map(str, e.absolute_path)) or "(top level)"
        raise LabError(f"{rel(path)}: breaks the result contract at {at}: {e.message}") from e
    if Path(data["notebook"]).stem != Path(path).stem:
        raise LabError(f"{rel(path)}: names notebook {data['notebook']}, but the file is named for {Path(path).stem}")
    if data["notebook"] not in data["inputs"]:
        raise LabError(f"{rel(path)}: inputs must include the notebook itself ({data['notebook']})")
    if not Path(path).with_suffix(".ipynb").exists():
        raise LabError(f"{rel(path)}: the executed notebook {rel(Path(path).with_suffix('.ipynb'))} is missing")
    unlabelled = sorted(set(data["metrics"]) - set(data.get("labels", {})))
    if unlabelled:
        raise LabError(f"{rel(path)}: metrics without labels: {', '.join(unlabelled)}")
    stale = [p for p, h in data["inputs"].items() if not (ROOT / p).is_file() or sha256(ROOT / p) != h]
    return Result(Path(path), data, stale)


def results_for(notebook: str) -> list[Result]:
    """Every GPU result of notebooks/<stem>.ipynb, newest first."""
    stem = Path(notebook).stem
    found = [load_result(p) for p in sorted((ROOT / "results").glob(f"*/{stem}.json"))]
    return sorted(found, key=lambda r: r.data["executed_at"], reverse=True)


def newest_result(notebook: str) -> Result | None:
    found = results_for(notebook)
    return found[0] if found else None


def all_results() -> list[Result]:
    return [load_result(p) for p in sorted((ROOT / "results").glob("*/*.json"))]
