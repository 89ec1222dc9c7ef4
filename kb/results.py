"""GPU results of the labs (results/<gpu-slug>/<stem>.{json,ipynb}): the one reader, which verifies them.

A result is believed only when it checks out against what was run, not against what the JSON says:

- it sits in the folder of the GPU it names (`gpu_slug(device.name)`), and that is not a CPU;
- it is a full run (`lab_mode: full`) on at least the GPUs its notebook requires;
- every metric equals the one the executed notebook beside it recorded (record.metric writes an
  `application/vnd.kb.metric+json` output), and the notebook recorded none that the JSON lacks;
- it names the commit it ran at, from a clean tree, with its inputs hashed before the run.

Two results that predate commits (results/legacy.yml) are exempt from the last rule only while their
bytes are exactly the listed ones. Staleness (an input changed since) is separate: a stale result loads,
with `stale` naming the files. Notebooks import this module (show), so it imports nothing from mkdocs,
torch, triton or snippets.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from kb.labs import ROOT, LabError, lab_meta, rel, sha256, snippet_closure

RESULTS = ROOT / "results"          # tests point this at a copy under tmp_path
DEFAULT_GPU = "nvidia-h200"
LEGACY_FILE = "legacy.yml"          # under RESULTS
METRIC_MIME = "application/vnd.kb.metric+json"
RESULT_SCHEMA = json.loads((ROOT / "schemas/result.schema.json").read_text(encoding="utf-8"))
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class ResultError(LabError):
    """A result file fails its contract or its verification; the message starts with the file and names the field."""


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'; the folder name under results/ (a copy of snippets.common.env.gpu_slug)."""
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def is_cpu_slug(slug: str) -> bool:
    return slug == "cpu" or slug.startswith("cpu-")


@dataclass
class Result:
    path: Path
    data: dict
    stale: list[str] = field(default_factory=list)
    legacy: bool = False

    @property
    def fresh(self) -> bool:
        return not self.stale

    @property
    def notebook_path(self) -> Path:
        """The executed notebook stored beside the JSON."""
        return self.path.with_suffix(".ipynb")

    @property
    def gpu(self) -> str:
        return self.path.parent.name

    @property
    def commit(self) -> str | None:
        return self.data.get("commit")


def where(path: Path) -> str:
    """results/<slug>/<file> for a file under RESULTS (also a patched one), else the repository-relative path."""
    path = Path(path).resolve()
    root = Path(RESULTS).resolve()
    return "results/" + path.relative_to(root).as_posix() if path.is_relative_to(root) else rel(path)


_VALIDATOR = jsonschema.validators.validator_for(RESULT_SCHEMA)(RESULT_SCHEMA)


@functools.lru_cache(maxsize=256)
def _schema_error(text: str) -> tuple[str, str] | None:
    """(field, message) of the first way this JSON text breaks the result schema, None if it does not; once
    per distinct text (a build quotes each result hundreds of times)."""
    error = jsonschema.exceptions.best_match(_VALIDATOR.iter_errors(json.loads(text)))
    return None if error is None else (".".join(map(str, error.absolute_path)) or "(top level)", error.message)


def _read(path: Path) -> dict:
    """JSON, schema and the file's own consistency; no verification against the notebook."""
    at = where(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultError(f"{at}: not readable JSON: {e}") from e
    error = _schema_error(text)
    if error is not None:
        raise ResultError(f"{at}: breaks the result contract at {error[0]}: {error[1]}")
    if Path(data["notebook"]).stem != Path(path).stem:
        raise ResultError(f"{at}: notebook = {data['notebook']}, but the file is named for {Path(path).stem}")
    if data["notebook"] not in data["inputs"]:
        raise ResultError(f"{at}: inputs must include the notebook itself ({data['notebook']})")
    if not Path(path).with_suffix(".ipynb").exists():
        raise ResultError(f"{at}: the executed notebook {where(Path(path).with_suffix('.ipynb'))} is missing")
    unlabelled = sorted(set(data["metrics"]) - set(data.get("labels", {})))
    if unlabelled:
        raise ResultError(f"{at}: metrics without labels: {', '.join(unlabelled)}")
    return data


def _stale(data: dict) -> list[str]:
    return [p for p, h in data["inputs"].items() if not (ROOT / p).is_file() or sha256(ROOT / p) != h]


def legacy_entries() -> dict[str, dict]:
    """results/legacy.yml by result path ('results/<slug>/<stem>.json')."""
    path = Path(RESULTS) / LEGACY_FILE
    if not path.exists():
        return {}
    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    except yaml.YAMLError as e:
        raise ResultError(f"results/{LEGACY_FILE}: not readable YAML: {e}") from e
    out = {}
    for i, e in enumerate(entries if isinstance(entries, list) else [None]):
        if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in
                                              ("result", "sha256", "notebook_sha256", "why")):
            raise ResultError(f"results/{LEGACY_FILE}: entry {i} needs result, sha256, notebook_sha256 and why")
        out[e["result"]] = e
    return out


def _is_legacy(path: Path) -> bool:
    entry = legacy_entries().get(where(path))
    if entry is None:
        return False
    at = where(path)
    if sha256(path) != entry["sha256"]:
        raise ResultError(f"{at}: sha256 differs from the one results/{LEGACY_FILE} lists: the file changed, so "
                          "its legacy exemption (no commit) no longer applies; re-run the lab with `make gpu-run`")
    if sha256(Path(path).with_suffix(".ipynb")) != entry["notebook_sha256"]:
        raise ResultError(f"{at}: notebook_sha256 differs from the one results/{LEGACY_FILE} lists: the executed "
                          "notebook changed, so the legacy exemption no longer applies; re-run the lab")
    return True


def notebook_metrics(nb: dict) -> dict[str, float]:
    """The metrics an executed notebook recorded (record.metric's machine-readable outputs), last one winning."""
    found = {}
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            rec = out.get("data", {}).get(METRIC_MIME)
            if isinstance(rec, str):
                rec = json.loads(rec)
            if isinstance(rec, dict) and "name" in rec:
                found[rec["name"]] = rec.get("value")
    return found


def _printed_lines(nb: dict) -> set[str]:
    lines = set()
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            if out.get("output_type") == "stream":
                text = out.get("text", "")
                lines.update(("".join(text) if isinstance(text, list) else text).splitlines())
    return lines


@functools.lru_cache(maxsize=64)
def _executed(nb_path: str, mtime_ns: int, size: int) -> tuple[dict, frozenset]:
    """(recorded metrics, printed lines) of an executed notebook, read once per version of the file: a site
    build verifies a result at every number a page quotes from it."""
    nb = json.loads(Path(nb_path).read_text(encoding="utf-8"))
    return notebook_metrics(nb), frozenset(_printed_lines(nb))


def _check_metrics(path: Path, data: dict, legacy: bool) -> None:
    at = where(path)
    nb_path = Path(path).with_suffix(".ipynb")
    try:
        st = nb_path.stat()
        recorded, lines = _executed(str(nb_path), st.st_mtime_ns, st.st_size)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultError(f"{at}: the executed notebook {where(nb_path)} is not readable: {e}") from e
    recorded = dict(recorded)
    if legacy and not recorded:  # recorded before record.metric wrote machine-readable outputs: its printed line
        for name, value in data["metrics"].items():
            label = data["labels"][name]
            line = f"{label['en']}: {value:.4g} {label['unit']}"
            if line not in lines:
                raise ResultError(f"{at}: metrics.{name} = {value} but the executed notebook never printed {line!r}")
        return
    for name, value in data["metrics"].items():
        if name not in recorded:
            raise ResultError(f"{at}: metrics.{name} = {value} but the executed notebook recorded no such metric")
        if recorded[name] != value:
            raise ResultError(f"{at}: metrics.{name} = {value} but the executed notebook recorded {recorded[name]}")
    extra = sorted(set(recorded) - set(data["metrics"]))
    if extra:
        raise ResultError(f"{at}: metrics lacks {', '.join(extra)}, which the executed notebook recorded")


def load(path: Path) -> Result:
    """Read one results/<slug>/<stem>.json and verify it (module docstring); raise ResultError naming the field."""
    path = Path(path)
    at = where(path)
    data = _read(path)
    slug, device = path.parent.name, data["device"]
    if is_cpu_slug(slug) or is_cpu_slug(gpu_slug(device["name"])) or device.get("cuda") is None:
        raise ResultError(f"{at}: device.name = {device['name']!r} (cuda {device.get('cuda')}): "
                          "results/ holds GPU results only")
    if slug != gpu_slug(device["name"]):
        raise ResultError(f"{at}: device.name = {device['name']!r} belongs under results/{gpu_slug(device['name'])}/,"
                          f" not results/{slug}/")
    if data["lab_mode"] != "full":
        raise ResultError(f"{at}: lab_mode = {data['lab_mode']!r}: only a full run is a result")
    notebook = ROOT / data["notebook"]
    if not notebook.is_file():
        raise ResultError(f"{at}: notebook = {data['notebook']} does not exist")
    need = max(1, lab_meta(notebook).gpus)
    if device["count"] < need:
        raise ResultError(f"{at}: device.count = {device['count']} but {data['notebook']} requires {need} GPU(s) "
                          "(metadata.kb.requires.gpus)")
    legacy = _is_legacy(path)
    if not legacy:
        if not isinstance(data.get("commit"), str) or not _COMMIT.match(data["commit"]):
            raise ResultError(f"{at}: commit = {data.get('commit')!r}: a result names the 40-hex commit it ran at "
                              "(run it with `make gpu-run`)")
        if data.get("tree_clean") is not True:
            raise ResultError(f"{at}: tree_clean = {data.get('tree_clean')!r}: the inputs must be those of the commit")
        if data.get("inputs_hashed") != "before-run":
            raise ResultError(f"{at}: inputs_hashed = {data.get('inputs_hashed')!r}: inputs must be hashed "
                              "'before-run'")
    _check_metrics(path, data, legacy)
    stale = _stale(data)
    if not stale:  # the recorded inputs are today's files, so the code that ran imports what today's does
        missing = sorted(snippet_closure(notebook) - set(data["inputs"]))
        if missing:
            raise ResultError(f"{at}: inputs lack {', '.join(missing)}, which {data['notebook']} imports: a "
                              "result whose inputs are cut short could not tell when it goes stale")
    return Result(path, data, stale, legacy)


def _stem(notebook_or_stem: str) -> str:
    return Path(notebook_or_stem).stem


def all_results() -> list[Result]:
    """Every results/<slug>/<stem>.json (not results/<slug>/partial/), each verified; the first failure raises."""
    return [load(p) for p in sorted(Path(RESULTS).glob("*/*.json"))]


def result_for(notebook_or_stem: str, gpu: str | None = None) -> Result | None:
    """The verified full result of that lab on that GPU slug (default DEFAULT_GPU); None if there is none."""
    path = Path(RESULTS) / (gpu or DEFAULT_GPU) / f"{_stem(notebook_or_stem)}.json"
    return load(path) if path.exists() else None


def problems() -> list[str]:
    """Every failure over results/ (one line each), for `make check`."""
    found = []
    try:
        entries = legacy_entries()
    except ResultError as e:
        return [str(e)]
    for name in entries:
        if not (Path(RESULTS) / name.removeprefix("results/")).is_file():
            found.append(f"results/{LEGACY_FILE}: lists {name}, which does not exist")
    for p in sorted(Path(RESULTS).glob("*/*.json")):
        try:
            load(p)
        except LabError as e:
            found.append(str(e))
    return found


def verified_results(notebook_or_stem: str) -> list[Result]:
    """Every verified result of a lab, over all GPUs, newest first; files that fail verification are left out."""
    found = []
    for p in sorted(Path(RESULTS).glob(f"*/{_stem(notebook_or_stem)}.json")):
        try:
            found.append(load(p))
        except LabError:
            continue
    return sorted(found, key=lambda r: r.data["executed_at"], reverse=True)


def show(stem: str, reason: str, lang: str = "zh") -> None:
    """In a notebook, for a part this machine cannot run: say why, then display every verified result of the lab."""
    from IPython.display import Markdown, display

    from kb import render
    from kb.strings import t

    found = verified_results(stem)
    display(Markdown(t(lang, "recorded_skip", reason=reason) if found else
                     f"{reason}: {t(lang, 'no_recorded', stem=_stem(stem))}"))
    for r in found:
        display(Markdown(f"**{render.provenance(r, lang)}**\n\n{render.metrics_table(r, lang)}"))
