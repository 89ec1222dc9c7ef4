"""Honest add + RMSNorm candidates: fused in one Triton kernel, unfused in two, and CUDA C++ (GPU only)."""

from snippets.kernel_agent.candidates.softmax import HEADER

FUSED = HEADER + '''

@triton.jit
def add_rmsnorm_rows(x_ptr, r_ptr, w_ptr, out_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * stride + tl.arange(0, BLOCK)
    mask = tl.arange(0, BLOCK) < n_cols
    h = tl.load(x_ptr + offs, mask=mask, other=0.0) + tl.load(r_ptr + offs, mask=mask, other=0.0)
    rstd = 1.0 / tl.sqrt_rn(tl.sum(h * h, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + tl.arange(0, BLOCK), mask=mask, other=0.0)
    tl.store(out_ptr + offs, h * rstd * w, mask=mask)


def kernel(x, residual, weight, out):
    block = triton.next_power_of_2(x.shape[1])
    add_rmsnorm_rows[(x.shape[0],)](x, residual, weight, out, x.shape[1], x.stride(0), 1e-6, BLOCK=block,
                                    num_warps=4 if block <= 2048 else 8)
'''

TWO_KERNELS = HEADER + '''

@triton.jit
def add(x_ptr, r_ptr, h_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(h_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(r_ptr + offs, mask=mask), mask=mask)


@triton.jit
def rmsnorm_chunked(h_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    base = tl.program_id(0) * n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        h = tl.load(h_ptr + base + cols, mask=cols < n_cols, other=0.0)
        acc += h * h
    rstd = 1.0 / tl.sqrt_rn(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        h = tl.load(h_ptr + base + cols, mask=cols < n_cols, other=0.0)
        w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + base + cols, h * rstd * w, mask=cols < n_cols)


def kernel(x, residual, weight, out):
    h = torch.empty_like(x)
    add[(triton.cdiv(x.numel(), 1024),)](x, residual, h, x.numel(), BLOCK=1024)
    rmsnorm_chunked[(x.shape[0],)](h, weight, out, x.shape[1], 1e-6, BLOCK=32)
'''

CUDA = r'''
import torch
from torch.utils.cpp_extension import load_inline

CPP = "void add_rmsnorm(torch::Tensor x, torch::Tensor r, torch::Tensor w, torch::Tensor out);"
CU = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void add_rmsnorm_kernel(const float* x, const float* r, const float* w, float* out, int n, float eps) {
    const long base = (long)blockIdx.x * n;
    __shared__ float warp_sums[32];
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { float h = x[base + i] + r[base + i]; s += h * h; }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffff, s, off);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.f;
        for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffff, s, off);
        if (threadIdx.x == 0) warp_sums[0] = s;
    }
    __syncthreads();
    const float rstd = 1.f / sqrtf(warp_sums[0] / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) out[base + i] = (x[base + i] + r[base + i]) * rstd * w[i];
}

void add_rmsnorm(torch::Tensor x, torch::Tensor r, torch::Tensor w, torch::Tensor out) {
    const int m = x.size(0), n = x.size(1);
    add_rmsnorm_kernel<<<m, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), r.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(), n, 1e-6f);
}
"""
ext = load_inline("kernel_agent_add_rmsnorm", cpp_sources=CPP, cuda_sources=CU, functions=["add_rmsnorm"])


def kernel(x, residual, weight, out):
    ext.add_rmsnorm(x, residual, weight, out)
'''
