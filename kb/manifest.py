"""Write the manifest a GPU machine without .git proves its inputs against (`make gpu-manifest`).

Writes `git ls-files -s` at HEAD to .device/manifest.txt (or --out) and prints the commit; refuses
when the tree has uncommitted changes outside results/, since then HEAD is not what would run. On the
GPU machine: `KB_COMMIT=<printed commit> KB_MANIFEST=<file> make gpu-run`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kb.gpu_run import _git, dirty_paths
from kb.labs import ROOT, rel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".device" / "manifest.txt")
    args = ap.parse_args(argv)
    dirty = dirty_paths()
    if dirty is None:
        print("gpu-manifest: not a git checkout (git status failed)", file=sys.stderr)
        return 2
    if dirty:
        print("gpu-manifest: commit first; uncommitted changes outside results/:\n  " + "\n  ".join(dirty),
              file=sys.stderr)
        return 1
    commit, listing = (_git("rev-parse", "HEAD") or "").strip(), _git("ls-files", "-s")
    if not commit or listing is None:
        print("gpu-manifest: git rev-parse / ls-files failed", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(listing, encoding="utf-8")
    print(f"gpu-manifest: {rel(args.out)} at commit {commit}", file=sys.stderr)
    print(commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
