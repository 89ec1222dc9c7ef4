"""The hand-written Hopper GEMM steps (csrc/step*.cu): build, run, and read what the compiler made of them.

C = A @ B.T with A [M, K] and B [N, K] bf16 (both K-major, as a Linear layer's input and weight), fp32
accumulation, C [M, N] bf16. Each step is one .cu file whose launcher `hgemm_stepN` is plain CUDA (no
torch headers), so nvcc compiles it on a machine without a GPU and its ptxas report and SASS can be
read there; `build(step)` adds a small torch wrapper and loads it with load_inline on an H100/H200.
TMA needs 16-byte aligned rows: K and N must be multiples of 8; M, N, K need not be multiples of the tile.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from snippets.common.checks import empty  # every output is allocated here: checks can poison them all
from snippets.common.cuda_tools import find_nvcc, find_tool

CSRC = Path(__file__).resolve().with_name("csrc")
ARCH = "-gencode=arch=compute_90a,code=sm_90a"  # wgmma, setmaxnreg: sm_90a only, not sm_90
# what load_inline adds (torch 2.13): C++20 and no implicit half/bf16 conversions
NVCC_FLAGS = ["-O3", "-std=c++20", "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
              "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]


@dataclass(frozen=True)
class Step:
    number: int
    source: str
    zh: str
    en: str
    tile: tuple[int, int, int]  # BM, BN, BK
    stages: int
    warpgroups: str  # who does what
    persistent: bool = False
    tma_store: bool = False

    @property
    def launcher(self) -> str:
        return f"hgemm_step{self.number}"


STEPS = {s.number: s for s in [
    Step(1, "step1_tma_wgmma.cu", "TMA 载入 + wgmma，一个 warpgroup，无流水", "TMA loads + wgmma, one warpgroup, no pipeline",
         (64, 128, 64), 1, "1 (loads and math)"),
    Step(2, "step2_pipeline.cu", "多级流水：full/empty mbarrier", "Multi-stage pipeline: full/empty mbarriers",
         (64, 128, 64), 4, "1 (thread 0 also loads)"),
    Step(3, "step3_warp_specialized.cu", "warp 特化：1 个生产者 + 2 个消费者 warpgroup，setmaxnreg",
         "Warp specialisation: 1 producer + 2 consumer warpgroups, setmaxnreg", (128, 256, 64), 4,
         "1 producer + 2 consumers"),
    Step(4, "step4_persistent.cu", "持久化 kernel + 分组 tile 调度", "Persistent kernel + grouped tile scheduler",
         (128, 256, 64), 4, "1 producer + 2 consumers", persistent=True),
    Step(5, "step5_tma_store.cu", "TMA store 尾处理（经共享内存）", "TMA-store epilogue (through shared memory)",
         (128, 256, 64), 3, "1 producer + 2 consumers", persistent=True, tma_store=True),
]}


def check_shapes(m: int, n: int, k: int) -> None:
    if min(m, n, k) <= 0 or k % 8 or n % 8:
        raise ValueError(f"M, N, K = {m}, {n}, {k}: TMA needs K and N to be positive multiples of 8 (16-byte rows)")


WRAPPER = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

extern "C" cudaError_t LAUNCHER(const void* a, const void* b, void* c, int m, int n, int k, cudaStream_t stream);

at::Tensor gemm(const at::Tensor& a, const at::Tensor& b, at::Tensor c) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda() && c.is_cuda(), "CUDA tensors expected");
  TORCH_CHECK(a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 && c.scalar_type() == at::kBFloat16,
              "bf16 tensors expected");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(1), "A [M, K] and B [N, K] expected");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && c.is_contiguous(), "contiguous tensors expected");
  TORCH_CHECK(c.size(0) == a.size(0) && c.size(1) == b.size(0), "C must be [M, N]");
  const c10::cuda::CUDAGuard guard(a.device());
  const cudaError_t err = LAUNCHER(a.data_ptr(), b.data_ptr(), c.data_ptr(), a.size(0), b.size(0), a.size(1),
                                   c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "LAUNCHER: ", cudaGetErrorString(err));
  return c;
}
"""

_BUILT: dict[int, object] = {}


def sources_digest() -> str:
    """load_inline hashes only the text it is given; the headers count too, so they go into the name."""
    h = hashlib.sha256()
    for f in sorted(CSRC.iterdir()):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:10]


def build(step: int, verbose: bool = False):
    """Compile and load step `step` (GPU machine, about a minute the first time; cached on disk and here)."""
    if step in _BUILT:
        return _BUILT[step]
    from torch.utils.cpp_extension import load_inline

    s = STEPS[step]
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"  # else load_inline adds -gencode for other archs (sm_90 fails)
    _BUILT[step] = load_inline(
        name=f"hgemm_step{step}_{sources_digest()}", cpp_sources=WRAPPER.replace("LAUNCHER", s.launcher),
        cuda_sources=(CSRC / s.source).read_text(), functions=["gemm"], extra_include_paths=[str(CSRC)],
        extra_cuda_cflags=["-O3", ARCH], verbose=verbose)
    return _BUILT[step]


def prebuild(steps=tuple(STEPS)) -> None:
    """Compile several steps at once, one process each (a build is one nvcc and one g++ job, most of a minute);
    build() then loads them from torch's extension cache on disk."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(len(steps), mp_context=mp.get_context("spawn")) as pool:
        list(pool.map(_compile, steps))


def _compile(step: int) -> None:
    build(step)


def gemm(step: int, a, b, out=None):
    """C = A @ B.T with hand-written step `step` (1..5). a: [M, K], b: [N, K], bf16 on an sm_90a GPU."""
    import torch

    (m, k), (n, k2) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    check_shapes(m, n, k)
    c = empty((m, n), torch.bfloat16, a.device) if out is None else out
    return build(step).gemm(a.contiguous(), b.contiguous(), c)


def parse_ptxas(report: str) -> dict[str, dict]:
    """{kernel: {registers, spill_stores, spill_loads, stack_bytes, barriers}} from nvcc -Xptxas -v."""
    out: dict[str, dict] = {}
    kernel = None
    for line in report.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)' for '(\w+)'", line):
            kernel = m.group(1)
            out[kernel] = {"registers": 0, "spill_stores": 0, "spill_loads": 0, "stack_bytes": 0, "barriers": 0}
        elif kernel is None:
            continue
        elif m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            out[kernel].update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif m := re.search(r"Used (\d+) registers", line):
            bars = re.search(r"used (\d+) barriers", line)
            out[kernel].update(registers=int(m.group(1)), barriers=int(bars.group(1)) if bars else 0)
            kernel = None
    return out


def compile_source(src: Path, cubin: Path, nvcc: str | None = None) -> dict:
    """nvcc -cubin for sm_90a with -Xptxas -v. Returns {cubin, ptxas: {kernel: {...}}, warnings: [...], seconds}."""
    import time

    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("no nvcc: install the CUDA toolkit or the pip wheel nvidia-cuda-nvcc")
    cmd = [nvcc, "-cubin", *NVCC_FLAGS, ARCH, "-Xptxas", "-v", "-I", str(CSRC), str(src), "-o", str(cubin)]
    start = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stderr}")
    text = r.stdout + r.stderr
    # ptxas reports C7508 (setmaxnreg ignored) and C7515-style wgmma serialisation as "info" lines with a code
    warnings = [line.strip() for line in text.splitlines()
                if "warning" in line.lower() or re.search(r"\(C\d{4}\)", line)]
    return {"cubin": cubin, "ptxas": parse_ptxas(text), "warnings": warnings, "seconds": time.perf_counter() - start}


def compile_cubin(step: int, out_dir: str | Path, nvcc: str | None = None, drop_launch_bounds: bool = False) -> dict:
    """One step's kernel through compile_source; ptxas holds that kernel's stats. drop_launch_bounds compiles a copy
    without __launch_bounds__, to show ptxas ignoring setmaxnreg (C7508)."""
    src = CSRC / STEPS[step].source
    if drop_launch_bounds:
        copy = Path(out_dir) / f"nolb_{src.name}"
        copy.write_text(re.sub(r"__launch_bounds__\([^)]*\)", "", src.read_text()))
        src = copy
    built = compile_source(src, Path(out_dir) / f"step{step}{'_nolb' if drop_launch_bounds else ''}.cubin", nvcc)
    (built["ptxas"],) = built["ptxas"].values()
    return built


SASS_OPS = ("HGMMA", "UTMALDG", "UTMASTG", "UTMACCTL", "SYNCS", "USETMAXREG", "WARPGROUP", "BAR", "STG", "STS",
            "LDS", "LDG")


def sass(cubin: str | Path, nvcc: str | None = None) -> str:
    return subprocess.run([find_tool("cuobjdump", nvcc), "-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout


def sass_ops(text: str) -> Counter:
    """Count SASS instructions by full mnemonic (HGMMA.64x256x16.F32.BF16, UTMALDG.2D, ...)."""
    ops: Counter = Counter()
    for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[\w]+)*)", text):
        ops[m.group(1)] += 1
    return ops


def sass_summary(ops: Counter) -> dict[str, int]:
    """Instruction counts grouped by the base names the lab talks about."""
    return {base: sum(n for op, n in ops.items() if op.split(".")[0] == base) for base in SASS_OPS}


def inspect(step: int, out_dir: str | Path, nvcc: str | None = None) -> dict:
    """Compile a step and read it back: ptxas registers/spills, warnings, SASS instruction counts."""
    built = compile_cubin(step, out_dir, nvcc)
    ops = sass_ops(sass(built["cubin"], nvcc))
    return {**built, "ops": ops, "summary": sass_summary(ops),
            "hgmma_shapes": sorted({op.split(".")[1] for op in ops if op.startswith("HGMMA.")})}
