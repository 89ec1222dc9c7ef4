"""Nsight Compute metrics of an accepted candidate, for the proposer's feedback where ncu is available: the
candidate runs once more at the timing shape, in a process of its own under `ncu --csv`, and only the launches
between torch.cuda.profiler.start() and stop() (the candidate's call) are profiled."""
from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
METRICS = {"gpu__time_duration.sum": "time_ns",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
           "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct"}


class ProfileError(Exception):
    pass


def unavailable(device: str) -> str | None:
    """Why ncu cannot profile here, or None when it can."""
    if not device.startswith("cuda"):
        return "ncu needs a GPU"
    if shutil.which("ncu") is None:
        return "no ncu on PATH"
    return None


def command(task_name: str, source_path: str, ncu: str = "ncu") -> list[str]:
    return [ncu, "--csv", "--profile-from-start", "off", "--metrics", ",".join(METRICS),
            sys.executable, "-m", "snippets.kernel_agent.profile", task_name, source_path]


def parse(text: str) -> dict[str, dict[str, float]]:
    """{kernel name: {short metric name: value}} from ncu's CSV (the last launch of each kernel wins)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        raise ProfileError("ncu printed no metrics table; its output began: " + " | ".join(lines[:5]))
    found: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        name, value = METRICS.get(row.get("Metric Name", "")), row.get("Metric Value", "")
        if name is None:
            continue
        try:
            found.setdefault(row["Kernel Name"], {})[name] = float(value.replace(",", ""))
        except ValueError:
            raise ProfileError(f"ncu metric {row['Metric Name']} of {row['Kernel Name']}: {value!r} is not a number")
    if not found:
        raise ProfileError("ncu's table holds none of the requested metrics (was any kernel launched?)")
    return found


def profile(task_name: str, source: str, timeout: float = 300.0) -> dict[str, dict[str, float]]:
    """Run the candidate once under ncu; raises ProfileError with ncu's own words when it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "candidate.py"
        path.write_text(source)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        try:
            p = subprocess.run(command(task_name, str(path)), capture_output=True, text=True, timeout=timeout,
                               cwd=ROOT, env=env, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise ProfileError(f"ncu did not finish within {timeout:.0f} s")
        if p.returncode != 0:
            raise ProfileError(f"ncu exited with {p.returncode}: {(p.stderr or p.stdout)[-600:]}")
        return parse(p.stdout)


def _run(task_name: str, path: str) -> None:
    """In the profiled process: one call at the timing shape, after a warm-up call that compiles."""
    import importlib.util

    import torch

    from snippets.kernel_agent.spec import TASKS

    task = TASKS[task_name]
    spec = importlib.util.spec_from_file_location("candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shape = task.bench["full"]
    inputs = [t.cuda() for t in task.make_inputs(shape, torch.Generator().manual_seed(0), "normal")]
    out = torch.empty(task.out_shape(shape), dtype=task.dtype, device="cuda")
    fn = getattr(module, task.entry)
    fn(*inputs, out)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn(*inputs, out)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    _run(*sys.argv[1:3])
