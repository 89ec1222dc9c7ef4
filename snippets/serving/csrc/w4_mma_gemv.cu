// W4A16 decode GEMV on tensor cores, Marlin's idea: the weights are laid out once so that the four f16x2 registers
// a lane dequantises from one word are already its A fragment of mma.m16n8k16 (16 output features by 16 k); x is
// the B operand, the batch along n (up to 8 rows; lanes of rows >= M read row 0 and their outputs are dropped); the
// scale multiplies the fp32 accumulator once per group of 128; loads run one group ahead of the arithmetic;
// split-K through atomics as in the Triton GEMV.
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

// c += A B for one k16 slice: A = one word's weights (a0: feature g, k 2q, 2q + 1; a1: feature g + 8; a2, a3: k + 8),
// B = x (b0: k 2q, 2q + 1 of batch row g; b1: k 2q + 8, 2q + 9)
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Block: WARPS warps, each TW tiles of 16 output features; grid (N / (16 TW WARPS), splits), each split `groups`
// groups of 128 along K. wq: per (group, tile, lane) two uint4, word s the k16 slice s of the group, so that a
// warp's tiles of one group are adjacent and every address in the loop is a base plus a constant.
template <int TW, int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
gemv(const half* __restrict__ x, const uint4* __restrict__ wq, const float* __restrict__ st, half* __restrict__ y,
     float* __restrict__ y32, int* __restrict__ cnt, int m, int n, int k, int groups) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int tile0 = (blockIdx.x * WARPS + warp) * TW, b0 = blockIdx.y * groups;
  const size_t wstep = (size_t)(n / 16) * 64;  // uint4 per group
  const uint4* wp = wq + (size_t)b0 * wstep + tile0 * 64 + lane * 2;
  const uint32_t* xp = reinterpret_cast<const uint32_t*>(x) + (size_t)(g < m ? g : 0) * (k / 2) + b0 * 64 + q;
  const float* sp = st + (size_t)b0 * n + tile0 * 16 + g;
  float acc[TW][4] = {};
  uint4 next[TW][2];
  uint32_t x_lo[8], x_hi[8];  // the next group's 8 slices of x: (k 2q, 2q + 1) and (k 2q + 8, 2q + 9) of row g
#pragma unroll
  for (int t = 0; t < TW; ++t) {
    next[t][0] = __ldg(wp + t * 64);
    next[t][1] = __ldg(wp + t * 64 + 1);
  }
#pragma unroll
  for (int s = 0; s < 8; ++s) {
    x_lo[s] = __ldg(xp + 8 * s);
    x_hi[s] = __ldg(xp + 8 * s + 4);
  }
  for (int it = 0; it < groups; ++it, wp += wstep, xp += 64, sp += n) {
    uint4 cur[TW][2];
    uint32_t b_lo[8], b_hi[8];
    // the next group's loads go out before this group's arithmetic (the last group reloads itself)
    const size_t ahead = it + 1 < groups ? wstep : 0;
    const int x_ahead = it + 1 < groups ? 64 : 0;
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      cur[t][0] = next[t][0];
      cur[t][1] = next[t][1];
      next[t][0] = __ldg(wp + ahead + t * 64);
      next[t][1] = __ldg(wp + ahead + t * 64 + 1);
    }
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      b_lo[s] = x_lo[s];
      b_hi[s] = x_hi[s];
      x_lo[s] = __ldg(xp + x_ahead + 8 * s);
      x_hi[s] = __ldg(xp + x_ahead + 8 * s + 4);
    }
#pragma unroll
    for (int t = 0; t < TW; ++t) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      const uint32_t w[8] = {cur[t][0].x, cur[t][0].y, cur[t][0].z, cur[t][0].w,
                             cur[t][1].x, cur[t][1].y, cur[t][1].z, cur[t][1].w};
#pragma unroll
      for (int s = 0; s < 8; ++s) {
        uint32_t d0, d1, d2, d3;
        dequant(w[s], d0, d1, d2, d3);
        mma(c, d0, d1, d2, d3, b_lo[s], b_hi[s]);
      }
      const float s_lo = __ldg(sp + t * 16), s_hi = __ldg(sp + t * 16 + 8);  // features g and g + 8
      acc[t][0] += c[0] * s_lo;  // feature g, batch rows 2q and 2q + 1
      acc[t][1] += c[1] * s_lo;
      acc[t][2] += c[2] * s_hi;  // feature g + 8
      acc[t][3] += c[3] * s_hi;
    }
  }
  // c[r] is feature g + 8 (r / 2) of batch row 2q + r % 2
  if (gridDim.y == 1) {
#pragma unroll
    for (int t = 0; t < TW; ++t)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if (2 * q + r % 2 < m)
          y[(size_t)(2 * q + r % 2) * n + (tile0 + t) * 16 + g + 8 * (r / 2)] = __float2half_rn(acc[t][r]);
    return;
  }
  // split-K: fp32 sums by atomics; the column block's last split writes y and re-zeroes the sums and its counter
#pragma unroll
  for (int t = 0; t < TW; ++t)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (2 * q + r % 2 < m)
        atomicAdd(y32 + (size_t)(2 * q + r % 2) * n + (tile0 + t) * 16 + g + 8 * (r / 2), acc[t][r]);
  __threadfence();
  __syncthreads();
  __shared__ int last;
  if (threadIdx.x == 0) last = atomicAdd(cnt + blockIdx.x, 1) == (int)gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
#pragma unroll
  for (int t = 0; t < TW; ++t)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (2 * q + r % 2 < m) {
        const size_t i = (size_t)(2 * q + r % 2) * n + (tile0 + t) * 16 + g + 8 * (r / 2);
        y[i] = __float2half_rn(__ldcg(y32 + i));
        y32[i] = 0.f;
      }
  if (threadIdx.x == 0) cnt[blockIdx.x] = 0;
}

}  // namespace w4mma

// y [m, n] = x [m, k] (fp16, m <= 8) times the packed W4 weights; y32 [m, n] fp32 and cnt [n / 16] int32 kept zero
extern "C" cudaError_t w4_mma_gemv(const void* x, const void* wq, const float* st, void* y, float* y32, int* cnt,
                                   int m, int n, int k, int tw, int warps, int splits, cudaStream_t stream) {
  const int cols = 16 * tw * warps, groups = k / 128 / splits;
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
  W4_CASE(1, 4) W4_CASE(1, 8) W4_CASE(2, 2) W4_CASE(2, 4) W4_CASE(2, 8)
#undef W4_CASE
  return cudaErrorInvalidConfiguration;
}
