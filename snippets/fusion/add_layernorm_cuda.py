"""The fused forward of add_layernorm.py written by hand in CUDA C++ (csrc/add_layernorm.cu).

The kernel and its launcher are plain CUDA (no torch headers), so nvcc compiles the .cu on its own and
its -Xptxas -v report can be read on a machine without a GPU; `build()` adds a small torch wrapper and
loads both with load_inline on a GPU machine. Dropout draws the same Philox stream as the Triton
kernel (csrc/philox.cuh), so both are checked against one reference with one mask.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

CSRC = Path(__file__).resolve().with_name("csrc")
CU = CSRC / "add_layernorm.cu"
TARGETS = {"sm_90a": "arch=compute_90a,code=sm_90a", "sm_80": "arch=compute_80,code=sm_80"}
# what load_inline adds (torch 2.13): C++20 and no implicit half/bf16 conversions
NVCC_FLAGS = ["-O3", "-std=c++20", "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
              "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]

WRAPPER = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <climits>
#include "add_layernorm.h"

std::vector<at::Tensor> add_layernorm_fwd(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                          const std::optional<at::Tensor>& bias, double eps, double p, int64_t seed,
                                          bool rms) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && residual.is_contiguous() && weight.is_contiguous(),
              "contiguous CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, "fp32 or bf16 expected");
  TORCH_CHECK(residual.sizes() == x.sizes() && residual.scalar_type() == x.scalar_type(), "residual must match x");
  const int64_t n = x.size(-1), rows = x.numel() / n;
  TORCH_CHECK(weight.numel() == n && weight.scalar_type() == x.scalar_type(), "weight must be [N], x's dtype");
  if (bias) TORCH_CHECK(bias->numel() == n && bias->scalar_type() == x.scalar_type() && bias->is_contiguous(),
                        "bias must be [N], x's dtype");
  TORCH_CHECK(p >= 0 && p < 1 && seed >= 0 && rows <= INT_MAX, "p in [0, 1), seed >= 0, rows < 2^31");
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = at::empty_like(x), h = at::empty_like(x);
  const auto f32 = x.options().dtype(at::kFloat);
  at::Tensor mean = rms ? at::Tensor() : at::empty({rows}, f32), rstd = at::empty({rows}, f32);
  const fusion::FwdParams params{x.data_ptr(), residual.data_ptr(), weight.data_ptr(),
                                 bias ? bias->data_ptr() : nullptr, y.data_ptr(), h.data_ptr(),
                                 rms ? nullptr : mean.data_ptr<float>(), rstd.data_ptr<float>(),
                                 static_cast<int>(rows), static_cast<int>(n), static_cast<float>(eps),
                                 static_cast<float>(p), static_cast<float>(1.0 / (1.0 - p)),
                                 static_cast<uint64_t>(seed), rms};
  const cudaError_t err = fusion::add_layernorm_fwd(params, x.scalar_type() == at::kBFloat16,
                                                    c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "add_layernorm_fwd: ", cudaGetErrorString(err),
              " (rows of at most 16384 elements, 8192 when not 16-byte aligned)");
  return {y, h, mean, rstd};
}
"""


def build(verbose: bool = False):
    """Compile and load the extension (GPU machine): `build().add_layernorm_fwd(x, residual, weight, bias,
    eps, p, seed, rms)` returns [y, h, mean or None, rstd], like add_layernorm.add_layernorm_fwd."""
    import torch
    from torch.utils.cpp_extension import load_inline

    if "TORCH_CUDA_ARCH_LIST" not in os.environ:  # else load_inline builds for every arch it knows
        os.environ["TORCH_CUDA_ARCH_LIST"] = "{}.{}".format(*torch.cuda.get_device_capability())
    return load_inline(name="fusion_add_layernorm", cpp_sources=WRAPPER, cuda_sources=CU.read_text(),
                       functions=["add_layernorm_fwd"], extra_include_paths=[str(CSRC)],
                       extra_cuda_cflags=["-O3"], verbose=verbose)


def parse_ptxas(report: str) -> dict[str, dict[str, dict[str, int]]]:
    """{arch: {kernel: {registers, spill_stores, spill_loads, stack_bytes, smem_bytes}}} from nvcc -Xptxas -v."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    kernel = arch = None
    for line in report.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)' for '(\w+)'", line):
            kernel, arch = _demangle(m.group(1)), m.group(2)
            out.setdefault(arch, {})[kernel] = {"registers": 0, "spill_stores": 0, "spill_loads": 0,
                                                 "stack_bytes": 0, "smem_bytes": 0}
        elif kernel is None:
            continue
        elif m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            out[arch][kernel].update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                                     spill_loads=int(m.group(3)))
        elif m := re.search(r"Used (\d+) registers", line):
            smem = re.search(r"(\d+) bytes smem", line)
            out[arch][kernel].update(registers=int(m.group(1)), smem_bytes=int(smem.group(1)) if smem else 0)
            kernel = None
    return out


def _demangle(name: str) -> str:
    """`add_layernorm_fwd_kernel<float, true, 4>` for a mangled name, when c++filt is there."""
    if not shutil.which("c++filt"):
        return name
    text = subprocess.run(["c++filt", "-p", name], capture_output=True, text=True).stdout.strip()
    return re.sub(r"^(?:void )?(?:(?:\w+|\(anonymous namespace\))::)*", "", text) or name


def compile_object(targets=("sm_90a", "sm_80"), out_dir: str | Path = ".", nvcc: str = "nvcc",
                   extra: tuple[str, ...] = ()) -> dict[str, dict[str, dict[str, int]]]:
    """nvcc -c the .cu for `targets` (keys of TARGETS) into out_dir; returns parse_ptxas of its report."""
    obj = Path(out_dir) / "add_layernorm.o"
    cmd = [nvcc, "-c", *NVCC_FLAGS, f"--threads={len(targets)}", "-Xptxas", "-v",
           *(f"-gencode={TARGETS[t]}" for t in targets), "-I", str(CSRC), *extra, str(CU), "-o", str(obj)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{r.stderr}")
    return parse_ptxas(r.stdout + r.stderr)


def global_accesses(obj: str | Path, cuobjdump: str | None = None) -> dict[str, dict[str, Counter]]:
    """{arch: {kernel: Counter of LDG/STG forms}} from the SASS in an object file: LDG.E.128 and STG.E.128
    are the 16-byte accesses. cuobjdump comes from the CUDA toolkit or, failing that, Triton's wheel."""
    if cuobjdump is None:
        import triton
        cuobjdump = shutil.which("cuobjdump") or str(Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump")
    sass = subprocess.run([cuobjdump, "-sass", str(obj)], capture_output=True, text=True, check=True).stdout
    out: dict[str, dict[str, Counter]] = {}
    arch = kernel = None
    for line in sass.splitlines():
        if m := re.match(r"\s*arch = (\w+)", line):
            arch = m.group(1)
        elif m := re.search(r"Function : (\S+)", line):
            kernel = _demangle(m.group(1))
            out.setdefault(arch, {})[kernel] = Counter()
        elif kernel and (m := re.search(r"\b((?:LDG|STG)[.\w]*)", line)):
            out[arch][kernel][m.group(1)] += 1
    return out
