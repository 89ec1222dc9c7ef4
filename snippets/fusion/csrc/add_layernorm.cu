// Fused dropout + residual add + LayerNorm/RMSNorm forward. One row per block (a warp per row and four
// rows per block when the row is short); 16-byte loads and stores; the row stays in registers, and
// mean and variance are two passes over those registers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "add_layernorm.h"
#include "philox.cuh"

namespace fusion {
namespace {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// A chunk is 16 bytes of T. VECTOR: n is a multiple of the chunk and the rows are 16-byte aligned, so a
// chunk lies wholly inside the row or wholly past its end and moves as one 16-byte access.
template <typename T, bool VECTOR>
__device__ __forceinline__ void load_chunk(const T* __restrict__ row, int col, int limit,
                                           float (&out)[16 / sizeof(T)]) {
  constexpr int C = 16 / sizeof(T);
  if (VECTOR) {
    uint4 raw = make_uint4(0, 0, 0, 0);
    if (col < limit) raw = __ldg(reinterpret_cast<const uint4*>(row + col));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < C; ++j) out[j] = to_float(e[j]);
  } else {
#pragma unroll
    for (int j = 0; j < C; ++j) out[j] = col + j < limit ? to_float(row[col + j]) : 0.f;
  }
}

template <typename T, bool VECTOR>
__device__ __forceinline__ void store_chunk(T* __restrict__ row, int col, int limit,
                                            const float (&in)[16 / sizeof(T)]) {
  constexpr int C = 16 / sizeof(T);
  if (VECTOR) {
    if (col >= limit) return;
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int j = 0; j < C; ++j) e[j] = from_float<T>(in[j]);
    *reinterpret_cast<uint4*>(row + col) = raw;
  } else {
#pragma unroll
    for (int j = 0; j < C; ++j)
      if (col + j < limit) row[col + j] = from_float<T>(in[j]);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the threads of one row. A block wider than a warp holds a single row (blockDim.y == 1).
__device__ __forceinline__ float row_sum(float v) {
  __shared__ float partial[32];
  v = warp_sum(v);
  if (blockDim.x == 32) return v;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : 0.f;
  __syncthreads();  // partial is reused by the next call
  return warp_sum(v);
}

// Row elements a thread holds: 64 fit in registers with 16-byte accesses; the scalar path's per-element
// bounds checks cost registers, so it stops at 32.
template <bool VECTOR>
constexpr int max_elements() { return VECTOR ? 64 : 32; }

// ITEMS chunks of 16 bytes per thread. Up to 32 elements with 16-byte accesses, ask for two blocks per
// SM (at most 128 registers): left to itself, nvcc 13.0 gave <float, true, 8> 64 registers and a spill.
template <typename T, bool VECTOR, int ITEMS>
__global__ void __launch_bounds__(kMaxThreadsPerRow, VECTOR && ITEMS * 16 / sizeof(T) <= 32 ? 2 : 1)
    add_layernorm_fwd_kernel(const FwdParams p) {
  constexpr int C = 16 / sizeof(T);
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const bool row_ok = row < p.rows;
  const int limit = row_ok ? p.n : 0;  // rows past the end still reach every barrier, on zeros
  const int64_t offset = static_cast<int64_t>(row_ok ? row : 0) * p.n;
  const T* __restrict__ x = static_cast<const T*>(p.x) + offset;
  const T* __restrict__ res = static_cast<const T*>(p.residual) + offset;

  float v[ITEMS][C];
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int col = (i * blockDim.x + threadIdx.x) * C;
    float xv[C];
    load_chunk<T, VECTOR>(x, col, limit, xv);
    load_chunk<T, VECTOR>(res, col, limit, v[i]);
    if (p.p > 0.f) {
      // chunks are aligned to C (8 bf16 or 4 fp32 columns), so one Philox call covers a chunk
      const Philox4 rnd = philox4x32_10(p.seed, col / 8, row);
      const int first = C == 8 ? 0 : col % 8;
#pragma unroll
      for (int j = 0; j < C; ++j) xv[j] = philox_uniform(rnd, first + j) >= p.p ? xv[j] * p.scale : 0.f;
    }
#pragma unroll
    for (int j = 0; j < C; ++j) {
      v[i][j] = to_float(from_float<T>(v[i][j] + xv[j]));  // normalise h as stored, like the Triton kernel
      sum += v[i][j];
    }
  }

// --8<-- [start:kernel]
  const float mean = p.rms ? 0.f : row_sum(sum) / p.n;
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int col = (i * blockDim.x + threadIdx.x) * C;
#pragma unroll
    for (int j = 0; j < C; ++j) {
      const float d = col + j < limit ? v[i][j] - mean : 0.f;
      ss += d * d;
    }
  }
  const float rstd = rsqrtf(row_sum(ss) / p.n + p.eps);
  if (threadIdx.x == 0 && row_ok) {
    if (p.mean) p.mean[row] = mean;
    p.rstd[row] = rstd;
  }

  T* __restrict__ h = static_cast<T*>(p.h) + offset;
  T* __restrict__ y = static_cast<T*>(p.y) + offset;
#pragma unroll
  for (int i = 0; i < ITEMS; ++i) {
    const int col = (i * blockDim.x + threadIdx.x) * C;
    if (col >= limit) continue;
    store_chunk<T, VECTOR>(h, col, limit, v[i]);
    float w[C], b[C] = {};
    load_chunk<T, VECTOR>(static_cast<const T*>(p.weight), col, p.n, w);
    if (p.bias) load_chunk<T, VECTOR>(static_cast<const T*>(p.bias), col, p.n, b);
#pragma unroll
    for (int j = 0; j < C; ++j) v[i][j] = (v[i][j] - mean) * rstd * w[j] + b[j];
    store_chunk<T, VECTOR>(y, col, limit, v[i]);
  }
// --8<-- [end:kernel]
}


template <typename T, bool VECTOR, int ITEMS>
cudaError_t launch(const FwdParams& p, int items, dim3 grid, dim3 block, cudaStream_t stream) {
  if (items > ITEMS) return cudaErrorInvalidValue;
  if constexpr (ITEMS > 1) {
    if (items < ITEMS) return launch<T, VECTOR, ITEMS / 2>(p, items, grid, block, stream);
  }
  add_layernorm_fwd_kernel<T, VECTOR, ITEMS><<<grid, block, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T, bool VECTOR>
constexpr int items_cap() { return max_elements<VECTOR>() / (16 / sizeof(T)); }

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <typename T>
cudaError_t dispatch(const FwdParams& p, cudaStream_t stream) {
  constexpr int C = 16 / sizeof(T);
  const bool vector = p.n % C == 0 && aligned16(p.x) && aligned16(p.residual) && aligned16(p.weight) &&
                      (!p.bias || aligned16(p.bias)) && aligned16(p.y) && aligned16(p.h);
  const int max_items = vector ? items_cap<T, true>() : items_cap<T, false>();
  const int chunks = (p.n + C - 1) / C;
  // chunks per thread: as few as 256 threads per row allow (fewer registers per thread, more warps per SM)
  int items = 1;
  while (items < max_items && (chunks + items - 1) / items > kMaxThreadsPerRow) items *= 2;
  const int threads = ((chunks + items - 1) / items + 31) / 32 * 32;
  if (threads > kMaxThreadsPerRow) return cudaErrorInvalidValue;
  const int rows_per_block = threads == 32 ? 4 : 1;
  const dim3 block(threads, rows_per_block);
  const dim3 grid((p.rows + rows_per_block - 1) / rows_per_block);
  return vector ? launch<T, true, items_cap<T, true>()>(p, items, grid, block, stream)
                : launch<T, false, items_cap<T, false>()>(p, items, grid, block, stream);
}

}  // namespace

cudaError_t add_layernorm_fwd(const FwdParams& params, bool bf16, cudaStream_t stream) {
  if (params.rows == 0) return cudaSuccess;
  if (params.rows < 0 || params.n <= 0 || !(params.p >= 0.f && params.p < 1.f)) return cudaErrorInvalidValue;
  return bf16 ? dispatch<__nv_bfloat16>(params, stream) : dispatch<float>(params, stream);
}

}  // namespace fusion
