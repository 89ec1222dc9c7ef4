"""Execute lab notebooks and write results/<gpu-slug>/<stem>.{ipynb,json} (`make gpu-run`).

Each notebook runs in a fresh kernel with LAB_MODE set; snippets/common/record.py writes its
metrics to KB_RECORD_PATH, and this runner adds the provenance: the sha256 of the notebook and of
every snippet file the kernel imported, the device and the toolchain. A failing cell stops the run,
naming the notebook, the cell and the error; results are written only for notebooks that finished,
each file replaced atomically, so earlier results stay as they were.

    python -m tools.gpu_run [NOTEBOOK ...] [--mode full|smoke] [--out results] [--allow-cpu]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from snippets.common.env import environment, gpu_slug  # noqa: E402
from tools.labs import LabError, lab_meta, read_notebook, rel, sha256  # noqa: E402


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


def with_sources(modules: list[str]) -> list[str]:
    """The imported snippet modules plus the C++/CUDA sources in their package's csrc/ folder: a kernel that a
    module compiles at run time is as much an input of the result as the module itself."""
    files = set(modules)
    for m in modules:
        csrc = (ROOT / m).parent / "csrc"
        if csrc.is_dir():
            files |= {rel(p) for p in csrc.rglob("*") if p.is_file() and p.suffix in {".cu", ".cuh", ".h", ".cpp"}}
    return sorted(files)


def run_one(path: Path, mode: str, out: Path, device: dict, inputs_before: str) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        nb, record, seconds = execute(path, mode, Path(tmp) / "record.json")
    if not record.get("modules"):
        raise RunError(f"{rel(path)}: recorded nothing: its last cell must call record.finish() "
                       "(tools/lab_cells.ENV_CELL)")
    notebook = rel(path)
    inputs = {notebook: inputs_before}
    inputs.update({m: sha256(ROOT / m) for m in with_sources(record["modules"])})
    result = {
        "notebook": notebook, "inputs": inputs,
        "executed_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lab_mode": mode, "seconds": round(seconds, 1),
        "device": {k: device.get(k) for k in ("name", "capability", "count", "driver", "cuda", "torch", "triton")},
        "metrics": record.get("metrics", {}), "labels": record.get("labels", {}),
        "tables": record.get("tables", {}),
    }
    target = out / gpu_slug(device["name"])
    _write_atomic(target / f"{path.stem}.ipynb", nbformat.writes(nb))
    _write_atomic(target / f"{path.stem}.json", json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return target / f"{path.stem}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--mode", choices=["full", "smoke"], default="full")
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    ap.add_argument("--allow-cpu", action="store_true", help="run without a GPU (tests of this runner)")
    args = ap.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    device = environment()
    if not device.get("cuda") and not args.allow_cpu:
        print("gpu-run: no CUDA GPU on this machine; results/ holds GPU results only", file=sys.stderr)
        return 2
    try:
        hashes = {}
        for p in paths:
            lab_meta(p)
            hashes[p] = sha256(p)
        for p in paths:
            written = run_one(p, args.mode, args.out, device, hashes[p])
            print(f"gpu-run: {rel(p)} -> {rel(written)}")
    except (LabError, RunError) as e:
        print(f"gpu-run: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
