// Fused dropout + residual add + LayerNorm/RMSNorm forward: parameters and launcher (plain C++ + CUDA
// runtime, so torch-free code can call it; add_layernorm_cuda.py wraps it for PyTorch).
#pragma once
#include <cuda_runtime_api.h>
#include <stdint.h>

namespace fusion {

struct FwdParams {
  const void* x;         // [rows, n], contiguous, fp32 or bf16 (all six tensors share the dtype)
  const void* residual;  // [rows, n]
  const void* weight;    // [n]
  const void* bias;      // [n] or nullptr
  void* y;               // [rows, n] out: norm(h) * weight + bias
  void* h;               // [rows, n] out: dropout(x) + residual
  float* mean;           // [rows] out, or nullptr (RMSNorm)
  float* rstd;           // [rows] out
  int rows, n;
  float eps, p;          // p = 0: no dropout
  float scale;           // 1 / (1 - p), rounded to float once by the caller (as Triton's kernel gets it)
  uint64_t seed;
  bool rms;
};

// The widest row it takes: 256 threads x 64 elements = 16384, or 8192 when n is not a multiple of
// 16 bytes / element size or a pointer is not 16-byte aligned (returns cudaErrorInvalidValue beyond).
constexpr int kMaxThreadsPerRow = 256;

cudaError_t add_layernorm_fwd(const FwdParams& params, bool bf16, cudaStream_t stream);

}  // namespace fusion
