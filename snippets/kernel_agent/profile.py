"""Nsight Compute metrics of an accepted candidate, for the proposer's feedback where ncu is available: the
candidate runs once more at the timing shape, in a sandbox of its own under `ncu --csv`, and only the launches
between torch.cuda.profiler.start() and stop() (the candidate's call) are profiled."""
from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys

from snippets.kernel_agent import sandbox

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


def command(ncu: str = "ncu") -> list[str]:
    """ncu around the launcher's profile mode, which reads the candidate and its inputs from stdin."""
    return [ncu, "--csv", "--profile-from-start", "off", "--metrics", ",".join(METRICS), sys.executable]


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


def profile(task, source: str, timeout: float = 300.0, trusted: bool = False) -> dict[str, dict[str, float]]:
    """Run the candidate once under ncu, in a sandbox like its evaluation's; raises ProfileError with ncu's
    own words when it fails."""
    shape = task.bench["full"]
    job = json.dumps({"source": source, "entry": task.entry, "specs": task.specs(shape, "normal"), "seed": 0,
                      "out_shape": list(task.out_shape(shape)), "out_dtype": str(task.dtype)[6:]})
    limits = sandbox.Limits()
    if trusted:
        argv, env = command() + [sandbox.launcher.__file__, "profile"], None
    else:
        problem = sandbox.isolation_problem("cuda")
        if problem:
            raise ProfileError(f"no sandbox for ncu: {problem}")
        argv = sandbox.bwrap_argv("cuda", limits) + ["--"] + command() + [sandbox.INSIDE, "profile"]
        env = {"PATH": "/usr/bin:/bin"}
    try:
        p = subprocess.run(argv, input=job, capture_output=True, text=True, timeout=timeout, env=env,
                           start_new_session=True)
    except subprocess.TimeoutExpired:
        raise ProfileError(f"ncu did not finish within {timeout:.0f} s")
    if p.returncode != 0:
        raise ProfileError(f"ncu exited with {p.returncode}: {(p.stderr or p.stdout)[-600:]}")
    return parse(p.stdout)
