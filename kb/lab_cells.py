"""The cells every lab notebook shares: setup first, environment last.

`make new-question ... LAB=1` writes them; tests/test_labs.py checks that every notebook's first
and last cells are exactly these, so the clone URL always follows `repo_url` in mkdocs.yml.
"""
from __future__ import annotations

from kb.labs import mkdocs_value


def setup_cell(url: str | None = None) -> str:
    url = url or mkdocs_value("repo_url")
    return f'''# Setup: find the repository (or fetch it in Colab), pick the device.
import os, pathlib, subprocess, sys

ROOT = next((p for p in [pathlib.Path.cwd(), *pathlib.Path.cwd().parents] if (p / "snippets").is_dir()), None)
if ROOT is None:  # Colab or another fresh machine
    ROOT = pathlib.Path("/content/kb") if pathlib.Path("/content").is_dir() else pathlib.Path.home() / "kb"
    if not ROOT.exists():
        subprocess.run(["git", "clone", "--depth", "1", "{url}", str(ROOT)], check=True)
sys.path.insert(0, str(ROOT))

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before any @triton.jit is defined
print("device:", torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU")'''


ENV_CELL = '''# Environment this notebook ran in; record.finish() also lists the snippet files it used.
from snippets.common import record
from snippets.common.env import describe

record.finish()
print(describe())'''
