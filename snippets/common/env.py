"""The environment a lab ran in: GPU, driver, CUDA, torch, Triton, commit.

Shared by every notebook's last cell and by `tools/gpu_run.py`, so the banner on the site and
the notebook's own printout come from one function.
"""
from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'; the folder name under results/."""
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def environment() -> dict:
    """Describe the device and toolchain; works with and without a GPU."""
    import torch

    env = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(
            name=props.name,
            capability=f"{props.major}.{props.minor}",
            count=torch.cuda.device_count(),
            memory_gib=round(props.total_memory / 2**30, 1),
            sms=props.multi_processor_count,
            cuda=torch.version.cuda,
        )
        smi = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]) \
            if shutil.which("nvidia-smi") else ""
        env["driver"] = smi.splitlines()[0] if smi else None
    else:
        env.update(name=f"CPU ({platform.machine()})", capability=None, count=0, cuda=None, driver=None)
    env["commit"] = _run(["git", "rev-parse", "--short=12", "HEAD"]) or None
    return env


def describe() -> str:
    """One line for the end of a notebook."""
    e = environment()
    return " | ".join(f"{k}={v}" for k, v in e.items() if v is not None)
