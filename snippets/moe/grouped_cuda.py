"""The grouped GEMM as hand-written sm_90a CUDA (csrc/grouped_ws.cu: the Hopper GEMM lab's step 5 with an
expert schedule). Needs an H100/H200; on other machines `compile_cubin` still builds it for sm_90a so that its
registers and SASS can be checked."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from snippets.gemm import hopper
from snippets.moe.grouped_gemm import check_args, plan

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCE = CSRC / "grouped_ws.cu"
BLOCK_M = 128  # step 5's tile: 128 rows (two consumers of 64) x 256 columns

WRAPPER = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

extern "C" cudaError_t moe_grouped_gemm(const void* x, const void* w, void* y, const int* tile_expert,
                                        const int* tile_row, const int* offs, int row_tiles, int tokens, int n,
                                        int k, int experts, cudaStream_t stream);

at::Tensor grouped_gemm(const at::Tensor& x, const at::Tensor& w, at::Tensor y, const at::Tensor& tile_expert,
                        const at::Tensor& tile_row, const at::Tensor& offs) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda() && y.is_cuda(), "CUDA tensors expected");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16 && y.scalar_type() == at::kBFloat16,
              "bf16 tensors expected");
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && y.is_contiguous(), "contiguous tensors expected");
  TORCH_CHECK(w.dim() == 3 && w.size(2) == x.size(1) && y.size(0) == x.size(0) && y.size(1) == w.size(1),
              "x [tokens, K], w [experts, N, K], y [tokens, N] expected");
  for (const at::Tensor* t : {&tile_expert, &tile_row, &offs})
    TORCH_CHECK(t->is_cuda() && t->scalar_type() == at::kInt && t->is_contiguous(), "int32 schedule expected");
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaError_t err = moe_grouped_gemm(x.data_ptr(), w.data_ptr(), y.data_ptr(), tile_expert.data_ptr<int>(),
                                           tile_row.data_ptr<int>(), offs.data_ptr<int>(), tile_expert.numel(),
                                           x.size(0), w.size(1), x.size(1), w.size(0),
                                           c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "moe_grouped_gemm: ", cudaGetErrorString(err));
  return y;
}
"""

_BUILT = []


def build(verbose: bool = False):
    """Compile and load the extension (an sm_90a GPU machine; most of a minute the first time)."""
    if not _BUILT:
        from torch.utils.cpp_extension import load_inline

        digest = hashlib.sha256(SOURCE.read_bytes() + hopper.sources_digest().encode()).hexdigest()[:10]
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"
        _BUILT.append(load_inline(name=f"moe_grouped_{digest}", cpp_sources=WRAPPER, cuda_sources=SOURCE.read_text(),
                                  functions=["grouped_gemm"], extra_include_paths=[str(hopper.CSRC)],
                                  extra_cuda_cflags=["-O3", hopper.ARCH], verbose=verbose))
    return _BUILT[0]


def grouped_mm_ws(x, w_nk, counts: list[int], tiles=None, out=None):
    """As grouped_gemm.grouped_mm, with each expert's weight stored transposed: w_nk [experts, N, K] (K-major,
    the layout wgmma reads; transpose once when the weights are loaded, not per call). K and N: multiples of 8.
    out: a [tokens, N] bf16 tensor to write into (a check fills it with NaN first)."""
    import torch

    tokens, k, n = check_args(x, w_nk.transpose(1, 2), counts)
    hopper.check_shapes(tokens, n, k)
    tile_e, tile_r, offs = tiles if tiles is not None else plan(counts, BLOCK_M, x.device)
    y = torch.empty((tokens, n), dtype=x.dtype, device=x.device) if out is None else out
    return build().grouped_gemm(x.contiguous(), w_nk.contiguous(), y, tile_e, tile_r, offs)


def compile_cubin(out_dir: str | Path, nvcc: str | None = None) -> dict:
    """nvcc -cubin for sm_90a with -Xptxas -v: {cubin, ptxas: {kernel: stats}, warnings, seconds}."""
    return hopper.compile_source(SOURCE, Path(out_dir) / "grouped_ws.cubin", nvcc)
