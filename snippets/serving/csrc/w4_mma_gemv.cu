// W4A16 decode GEMV on tensor cores, Marlin's idea: the weights are laid out once so that the two f16x2 registers
// a lane dequantises from a nibble pair are already its B fragment of mma.m16n8k16; x is the A operand (rows 8..15
// zero, rows M..7 a copy of row 0 whose outputs are dropped); the scale multiplies the fp32 accumulator once per
// group of 128; loads run one group ahead of the arithmetic; split-K through atomics as in the Triton GEMV.
#include <cuda_fp16.h>
#include <stdint.h>

namespace w4mma {

// low nibbles: (w & 0xF) | 0x6400 = 1024 + u, minus 1032 leaves u - 8; high nibbles in place: 1024 + 16u, times
// 1/16 minus 72 leaves u - 8. d_j holds nibble j in its low half and nibble j + 4 in its high half.
__device__ __forceinline__ void dequant(uint32_t w, uint32_t& d0, uint32_t& d1, uint32_t& d2, uint32_t& d3) {
  const uint32_t t = w >> 8;
  asm("lop3.b32 %0, %1, 0x000F000F, 0x64006400, 0xEA;" : "=r"(d0) : "r"(w));
  asm("lop3.b32 %0, %1, 0x00F000F0, 0x64006400, 0xEA;" : "=r"(d1) : "r"(w));
  asm("lop3.b32 %0, %1, 0x000F000F, 0x64006400, 0xEA;" : "=r"(d2) : "r"(t));
  asm("lop3.b32 %0, %1, 0x00F000F0, 0x64006400, 0xEA;" : "=r"(d3) : "r"(t));
  const uint32_t magic = 0x64086408u, sixteenth = 0x2C002C00u, offset = 0xD480D480u;
  asm("sub.f16x2 %0, %0, %1;" : "+r"(d0) : "r"(magic));
  asm("fma.rn.f16x2 %0, %0, %1, %2;" : "+r"(d1) : "r"(sixteenth), "r"(offset));
  asm("sub.f16x2 %0, %0, %1;" : "+r"(d2) : "r"(magic));
  asm("fma.rn.f16x2 %0, %0, %1, %2;" : "+r"(d3) : "r"(sixteenth), "r"(offset));
}

// c += A B for one k16 slice: A rows 0..7 in a_lo (k 2q, 2q + 1) and a_hi (k 2q + 8, 2q + 9), rows 8..15 zero
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a_lo, uint32_t a_hi, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a_lo), "r"(0u), "r"(a_hi), "r"(0u), "r"(b0), "r"(b1));
}

// Block: WARPS warps, each TW tiles of 8 columns; grid (N / (8 TW WARPS), splits), each split `groups` groups of
// 128 along K. wq: per (group, tile, lane) one uint4, word i covering k = 128 group + 32 i + the lane's offsets, so
// that a warp's tiles of one group are adjacent and every address in the loop is a base plus a constant.
template <int TW, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
gemv(const half* __restrict__ x, const uint4* __restrict__ wq, const float* __restrict__ st, half* __restrict__ y,
     float* __restrict__ y32, int* __restrict__ cnt, int m, int n, int k, int groups) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int tile0 = (blockIdx.x * WARPS + warp) * TW, b0 = blockIdx.y * groups;
  const bool row = g < m;  // lanes of rows >= m read row 0 of x: their output rows are never stored
  const size_t wstep = (size_t)(n / 8) * 32;
  const uint4* wp = wq + (size_t)b0 * wstep + tile0 * 32 + lane;
  const uint32_t* xp = reinterpret_cast<const uint32_t*>(x) + (size_t)(row ? g : 0) * (k / 2) + b0 * 64 + q;
  const float* sp = st + (size_t)b0 * n + tile0 * 8 + 2 * q;
  float acc[TW][2] = {};
  uint4 next[TW];
  uint32_t x_lo[8], x_hi[8];  // the next group's 8 slices of x: (k 2q, 2q + 1) and (k 2q + 8, 2q + 9) of row g
#pragma unroll
  for (int t = 0; t < TW; ++t) next[t] = __ldg(wp + t * 32);
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    x_lo[s] = __ldg(xp + 8 * s);
    x_hi[s] = __ldg(xp + 8 * s + 4);
  }
  for (int it = 0; it < groups; ++it, wp += wstep, xp += 64, sp += n) {
    uint4 cur[TW];
    uint32_t a_lo[8], a_hi[8];
    // the next group's loads go out before this group's arithmetic (the last group reloads itself)
    const size_t ahead = it + 1 < groups ? wstep : 0;
    const int x_ahead = it + 1 < groups ? 64 : 0;
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      cur[t] = next[t];
      next[t] = __ldg(wp + ahead + t * 32);
    }
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      a_lo[s] = x_lo[s];
      a_hi[s] = x_hi[s];
      x_lo[s] = __ldg(xp + x_ahead + 8 * s);
      x_hi[s] = __ldg(xp + x_ahead + 8 * s + 4);
    }
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      const uint32_t w[4] = {cur[t].x, cur[t].y, cur[t].z, cur[t].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t d0, d1, d2, d3;
        dequant(w[i], d0, d1, d2, d3);
        mma(c, a_lo[2 * i], a_hi[2 * i], d0, d1);  // slice 2i: b0 = k 2q, 2q + 1; b1 = k 2q + 8, 2q + 9
        mma(c, a_lo[2 * i + 1], a_hi[2 * i + 1], d2, d3);
      }
      const float2 s = __ldg(reinterpret_cast<const float2*>(sp + t * 8));
      acc[t][0] += c[0] * s.x;  // row g, columns 2q and 2q + 1 of the tile
      acc[t][1] += c[1] * s.y;
    }
  }
  if (gridDim.y == 1) {
    if (g < m)
#pragma unroll
      for (int t = 0; t < TW; ++t)
        *reinterpret_cast<half2*>(y + (size_t)g * n + (tile0 + t) * 8 + 2 * q) = __floats2half2_rn(acc[t][0], acc[t][1]);
    return;
  }
  // split-K: fp32 sums by atomics; the column block's last split writes y and re-zeroes the sums and its counter
  if (g < m)
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      float* p = y32 + (size_t)g * n + (tile0 + t) * 8 + 2 * q;
      atomicAdd(p, acc[t][0]);
      atomicAdd(p + 1, acc[t][1]);
    }
  __threadfence();
  __syncthreads();
  __shared__ int last;
  if (threadIdx.x == 0) last = atomicAdd(cnt + blockIdx.x, 1) == (int)gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (g < m)
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      float* p = y32 + (size_t)g * n + (tile0 + t) * 8 + 2 * q;
      const float2 v = __ldcg(reinterpret_cast<const float2*>(p));
      *reinterpret_cast<half2*>(y + (size_t)g * n + (tile0 + t) * 8 + 2 * q) = __floats2half2_rn(v.x, v.y);
      *reinterpret_cast<float2*>(p) = make_float2(0.f, 0.f);
    }
  if (threadIdx.x == 0) cnt[blockIdx.x] = 0;
}

}  // namespace w4mma

// y [m, n] = x [m, k] (fp16, m <= 8) times the packed W4 weights; y32 [m, n] fp32 and cnt [n / 8] int32 kept zero
extern "C" cudaError_t w4_mma_gemv(const void* x, const void* wq, const float* st, void* y, float* y32, int* cnt,
                                   int m, int n, int k, int tw, int warps, int splits, cudaStream_t stream) {
  const int cols = 8 * tw * warps, groups = k / 128 / splits;
  if (m < 1 || m > 8 || n % cols || k % (128 * splits)) return cudaErrorInvalidValue;
  const dim3 grid(n / cols, splits), block(32 * warps);
  const auto* xh = static_cast<const half*>(x);
  const auto* w = static_cast<const uint4*>(wq);
  auto* yh = static_cast<half*>(y);
#define W4_CASE(TW, WARPS) \
  if (tw == TW && warps == WARPS) { \
    w4mma::gemv<TW, WARPS><<<grid, block, 0, stream>>>(xh, w, st, yh, y32, cnt, m, n, k, groups); \
    return cudaGetLastError(); \
  }
  W4_CASE(4, 2) W4_CASE(4, 4) W4_CASE(4, 8) W4_CASE(8, 2) W4_CASE(8, 4)
#undef W4_CASE
  return cudaErrorInvalidConfiguration;
}
