"""Where the CUDA compiler and binary tools are: a CUDA toolkit, or the pip wheels pinned in requirements.txt
(nvidia-cuda-nvcc and its companions put nvcc under nvidia/cu13/bin), or, for cuobjdump and nvdisasm, the copies
in Triton's wheel. Compiling needs no GPU."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find_nvcc() -> str | None:
    """nvcc from PATH, the usual toolkit folder, or the pip wheel nvidia-cuda-nvcc."""
    found = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None)
    if found:
        return found
    for base in map(Path, sys.path):
        for cand in (base / "nvidia/cu13/bin/nvcc", base / "nvidia/cuda_nvcc/bin/nvcc"):
            if os.access(cand, os.X_OK):
                return str(cand)
    return None


def find_tool(name: str, nvcc: str | None = None) -> str:
    """cuobjdump / nvdisasm: PATH, next to nvcc, or the copies in Triton's wheel."""
    if shutil.which(name):
        return shutil.which(name)
    if nvcc and os.access(Path(nvcc).with_name(name), os.X_OK):
        return str(Path(nvcc).with_name(name))
    import triton
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name)
