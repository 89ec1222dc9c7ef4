"""Runs a test script in a process of its own, where Triton compiles: the tests' own process runs Triton's
interpreter (conftest.py), which cannot build for a GPU or hand out SASS."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_compiled(script: str, *args: str) -> str:
    """`python -c script args` in the repository root without TRITON_INTERPRET; its stdout, once it exits 0."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout
