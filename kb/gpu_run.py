"""Execute lab notebooks and write results/<gpu-slug>/<stem>.{ipynb,json} (`make gpu-run`).

Each notebook runs in a fresh kernel with LAB_MODE set; snippets/common/record.py writes its
metrics to KB_RECORD_PATH (and into the cell outputs, which kb/results.py checks the JSON against).
This runner adds the provenance: the sha256 of the notebook and of every snippet file the kernel
imported, taken BEFORE the run (a file that changes during the run refuses the result), the commit
and whether the tree was clean, the device and the toolchain. A lab whose hardware needs
(metadata.kb.requires) this machine does not meet is refused before anything runs, unless --partial:
then it runs and is written to results/<slug>/partial/, never over a full result. A failing cell
stops the run, naming the notebook, the cell and the error; results are written only for notebooks
that finished, each file replaced atomically, so earlier results stay as they were.

Provenance: with a .git, `git rev-parse HEAD` and `git status --porcelain` (results/ ignored). On a
GPU machine that got a copy of the tree without .git: KB_COMMIT=<40 hex> and KB_MANIFEST=<the output
of `git ls-files -s` at that commit, from `make gpu-manifest`>; the tree is clean when every input's
git blob hash equals the manifest's.

With --stale, only the labs whose result on this GPU is not fresh run, each in a process of its own,
inside a time budget (kb/rerecord.py).

    python -m kb.gpu_run [NOTEBOOK ...] [--mode full|smoke] [--out results] [--allow-cpu] [--partial]
    python -m kb.gpu_run --stale [--budget-s 1500] [NOTEBOOK ...]
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from tqdm import tqdm

from kb.labs import ROOT, LabError, lab_meta, read_notebook, rel, sha256, unmet_needs
from kb.results import gpu_slug

RESULTS = ROOT / "results"
SKIP_DIRS = {"__pycache__", ".ipynb_checkpoints"}


class RunError(RuntimeError):
    """A notebook failed; the message names the notebook, the cell and the error."""


def _cell_error(path: Path, nb, err: Exception) -> RunError:
    index = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                  and any(o.get("output_type") == "error" for o in c.get("outputs", []))), None)
    if index is None:
        index = getattr(err, "cell_index", None)
    first = ""
    if index is not None:
        first = nb.cells[index].source.strip().splitlines()[0][:80] if nb.cells[index].source.strip() else ""
    ename = getattr(err, "ename", type(err).__name__)
    evalue = getattr(err, "evalue", str(err).strip().splitlines()[-1] if str(err).strip() else "")
    return RunError(f"{rel(path)}: cell {index} ({first!r}) failed: {ename}: {evalue}")


def execute(path: Path, mode: str, record_path: Path, timeout: int = 600, progress: bool = True):
    """Run one notebook top to bottom; return (executed notebook, record dict, seconds)."""
    read_notebook(path)  # a clear error for a file that is not a notebook
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as e:  # nbformat raises several types for malformed files
        raise LabError(f"{rel(path)}: not a valid notebook: {e}") from e
    os.environ.update(LAB_MODE=mode, KB_RECORD_PATH=str(record_path))
    record_path.unlink(missing_ok=True)
    bar = tqdm(total=sum(c.cell_type == "code" for c in nb.cells), desc=path.name, unit="cell",
               disable=not progress, leave=True)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False,
                            resources={"metadata": {"path": str(path.parent)}},
                            on_cell_executed=lambda **kw: bar.update(1))
    start = time.perf_counter()
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
        raise _cell_error(path, nb, e) from None
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    record = json.loads(record_path.read_text(encoding="utf-8")) if record_path.exists() else {}
    return nb, record, seconds


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp", encoding="utf-8") as f:
        f.write(text)
    Path(f.name).chmod(0o644)
    Path(f.name).replace(path)


DATA_SUFFIXES = {".cu", ".cuh", ".h", ".hpp", ".cpp", ".c", ".yml", ".yaml", ".json", ".toml", ".txt", ".csv"}


def with_sources(modules: list[str]) -> list[str]:
    """The imported snippet modules plus every source and data file in and below their folders (C++/CUDA that
    a module compiles at run time, YAML or JSON it reads): each is as much an input of the result as the
    module itself."""
    files = set(modules)
    for folder in {(ROOT / m).parent for m in modules if m.startswith("snippets/") and (ROOT / m).parent != ROOT / "snippets"}:
        files |= {rel(p) for p in folder.rglob("*") if p.is_file() and p.suffix in DATA_SUFFIXES
                  and not SKIP_DIRS & set(p.relative_to(ROOT).parts)}
    return sorted(files)


def hash_inputs(notebook: Path) -> dict[str, str]:
    """sha256 of every file under snippets/ and of the notebook, by repository-relative path: taken before a run."""
    files = [p for p in (ROOT / "snippets").rglob("*")
             if p.is_file() and not SKIP_DIRS & set(p.relative_to(ROOT).parts) and p.suffix != ".pyc"]
    return {rel(p): sha256(p) for p in [*files, Path(notebook)]}


def inputs_from(before: dict[str, str], notebook: str, modules: list[str]) -> dict[str, str]:
    """The result's inputs, hashed before the run; refuse if any changed (or appeared) during it."""
    inputs = {notebook: before[notebook]}
    for m in with_sources(modules):
        if m not in before:
            raise RunError(f"{notebook}: input {m} did not exist before the run; refusing to write the result")
        inputs[m] = before[m]
    changed = [p for p, h in inputs.items() if not (ROOT / p).is_file() or sha256(ROOT / p) != h]
    if changed:
        raise RunError(f"{notebook}: inputs changed during the run ({', '.join(changed)}); the result would not "
                       "describe the code that produced it, so it is not written")
    return inputs


def git_blob(path: Path) -> str:
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _git(*args: str) -> str | None:
    try:
        run = subprocess.run(["git", *args], capture_output=True, text=True, timeout=60, cwd=ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return run.stdout if run.returncode == 0 else None


def dirty_paths() -> list[str] | None:
    """`git status --porcelain` outside results/, or None without git."""
    out = _git("status", "--porcelain", "--", ".", ":(exclude)results")
    return None if out is None else [line for line in out.splitlines() if line.strip()]


def read_manifest(path: Path) -> dict[str, str]:
    """`git ls-files -s` output: '<mode> <sha1> <stage>\t<path>' -> {path: sha1}."""
    found = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        meta, _, name = line.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and name:
            found[name] = parts[1]
    return found


def provenance(inputs: list[str]) -> tuple[str | None, bool, str]:
    """(commit, tree_clean, why not clean) for these inputs. KB_COMMIT and KB_MANIFEST, when given, win over
    a .git folder: a copy of the tree on a GPU machine may carry a .git from another commit."""
    if (ROOT / ".git").exists() and not os.environ.get("KB_MANIFEST"):
        commit = (_git("rev-parse", "HEAD") or "").strip() or None
        dirty = dirty_paths()
        if dirty is None:
            return commit, False, "git status failed"
        return commit, not dirty, ("uncommitted changes: " + "; ".join(dirty[:5])) if dirty else ""
    commit = os.environ.get("KB_COMMIT")
    if not commit or not re.fullmatch(r"[0-9a-f]{40}", commit):
        return None, False, "KB_COMMIT is not a 40-hex commit (and no usable .git)"
    manifest = os.environ.get("KB_MANIFEST")
    if not manifest or not Path(manifest).is_file():
        return commit, False, "KB_MANIFEST names no file (make gpu-manifest writes it)"
    blobs = read_manifest(Path(manifest))
    differ = [p for p in inputs if blobs.get(p) != git_blob(ROOT / p)]
    if differ:
        return commit, False, f"inputs differ from commit {commit[:12]}: {', '.join(differ[:5])}"
    return commit, True, ""


@contextlib.contextmanager
def commit_for_notebooks():
    """In manifest mode the tree's .git (if any) is from another commit, and a notebook's environment cell
    asks git for HEAD: point git at a folder whose HEAD is KB_COMMIT, so the notebook prints the commit the
    JSON records. Outside manifest mode, nothing changes."""
    commit = os.environ.get("KB_COMMIT", "")
    if not os.environ.get("KB_MANIFEST") or not re.fullmatch(r"[0-9a-f]{40}", commit):
        yield
        return
    with tempfile.TemporaryDirectory() as git_dir:
        (Path(git_dir) / "objects").mkdir()
        (Path(git_dir) / "refs").mkdir()
        (Path(git_dir) / "HEAD").write_text(commit + "\n")
        before = os.environ.get("GIT_DIR")
        os.environ["GIT_DIR"] = git_dir
        try:
            yield
        finally:
            if before is None:
                os.environ.pop("GIT_DIR", None)
            else:
                os.environ["GIT_DIR"] = before


def run_one(path: Path, mode: str, out: Path, device: dict, partial: bool = False) -> Path:
    before = hash_inputs(path)
    with tempfile.TemporaryDirectory() as tmp, commit_for_notebooks():
        nb, record, seconds = execute(path, mode, Path(tmp) / "record.json")
    notebook = rel(path)
    if not record.get("modules"):
        raise RunError(f"{notebook}: recorded nothing: its last cell must call record.finish() "
                       "(kb/lab_cells.ENV_CELL)")
    inputs = inputs_from(before, notebook, record["modules"])
    commit, clean, why = provenance(sorted(inputs))
    result = {
        "notebook": notebook, "inputs": inputs, "inputs_hashed": "before-run",
        "commit": commit, "tree_clean": clean,
        "executed_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lab_mode": "partial" if partial else mode, "seconds": round(seconds, 1),
        "device": {k: device.get(k) for k in ("name", "capability", "count", "driver", "cuda", "torch", "triton")},
        "metrics": record.get("metrics", {}), "labels": record.get("labels", {}),
        "tables": record.get("tables", {}),
    }
    if mode == "full" and not partial and not (commit and clean):
        print(f"gpu-run: {notebook}: {why or 'no commit'}: the result is written but will fail verification "
              "(commit/tree_clean); commit first, or pass KB_COMMIT and KB_MANIFEST", file=sys.stderr)
    target = out / gpu_slug(device["name"])
    if partial:
        target = target / "partial"
    with sigterm_deferred():  # the executed notebook and its JSON are written as a pair, or not at all
        _write_atomic(target / f"{path.stem}.ipynb", nbformat.writes(nb))
        _write_atomic(target / f"{path.stem}.json", json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return target / f"{path.stem}.json"


@contextlib.contextmanager
def sigterm_deferred():
    """SIGTERM arriving inside the block is delivered when it ends."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})



def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--mode", choices=["full", "smoke"], default="full")
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    ap.add_argument("--allow-cpu", action="store_true",
                    help="run without a GPU (tests of this runner); needs an --out other than results/")
    ap.add_argument("--partial", action="store_true",
                    help="run labs whose hardware needs are unmet anyway, into results/<slug>/partial/")
    ap.add_argument("--stale", action="store_true",
                    help="run only the labs whose result on this GPU is stale, legacy or missing (kb/rerecord.py)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="with --stale: stop before this many seconds (default 1500)")
    args = ap.parse_args(argv)
    if args.budget_s is not None and not args.stale:
        print("gpu-run: --budget-s goes with --stale", file=sys.stderr)
        return 2
    if args.stale and (args.partial or args.mode != "full"):
        print("gpu-run: --stale re-records full results only (no --partial, no --mode smoke)", file=sys.stderr)
        return 2
    paths = [p.resolve() for p in args.notebooks] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    if args.allow_cpu and args.out.resolve() == RESULTS.resolve():
        print("gpu-run: --allow-cpu writes only to an --out folder other than results/", file=sys.stderr)
        return 2
    from snippets.common.env import environment  # torch: imported only when running

    device = environment()
    if not device.get("cuda") and not args.allow_cpu:
        print("gpu-run: no CUDA GPU on this machine; results/ holds GPU results only", file=sys.stderr)
        return 2
    if args.stale:
        from kb import rerecord

        child = ["--out", str(args.out)] + (["--allow-cpu"] if args.allow_cpu else [])
        return rerecord.main(args.notebooks, args.budget_s or rerecord.DEFAULT_BUDGET_S, gpu_slug(device["name"]),
                             device.get("count") or 0, device.get("capability"), child)
    try:
        partial = {}
        for p in paths:
            why = unmet_needs(lab_meta(p), device.get("count") or 0, device.get("capability"))
            if why and args.mode == "full" and not args.partial:
                print(f"gpu-run: {rel(p)} {why}; refusing to run it (--partial runs it anyway, "
                      "into results/<slug>/partial/)", file=sys.stderr)
                return 3
            partial[p] = bool(why) and args.mode == "full"
        for p in paths:
            written = run_one(p, args.mode, args.out, device, partial[p])
            print(f"gpu-run: {rel(p)} -> {rel(written)}")
    except (LabError, RunError) as e:
        print(f"gpu-run: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
