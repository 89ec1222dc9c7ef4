// W4A16 and W8A16 decode GEMV on tensor cores, Marlin's idea: the weights are laid out once so that the four 16-bit
// pairs a lane dequantises from one word (W8: two) are already its A fragment of mma.m16n8k16 (16 output features by 16
// k); x (fp16, or for W4 bf16) is the B operand, the batch along n (up to 8 rows; lanes of rows >= M read row 0 and
// their outputs are dropped); the scale multiplies the fp32 accumulator once per group of 128; loads run STAGES groups
// ahead of the arithmetic; the warps of a block divide K and add in shared memory, and splits > 1 divides K among
// blocks too, through atomics as in the Triton GEMV.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

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

// bf16 has 7 mantissa bits, so the high nibbles cannot stay in place: shifts by 4, 8 and 12 bring each pair to bits
// 0-3 and 16-19; (w & 0xF) | 0x4300 = 128 + u, and one HFMA2 (times 1, minus 136) leaves u - 8.
__device__ __forceinline__ void dequant_bf16(uint32_t w, uint32_t& d0, uint32_t& d1, uint32_t& d2, uint32_t& d3) {
  asm("lop3.b32 %0, %1, 0x000F000F, 0x43004300, 0xEA;" : "=r"(d0) : "r"(w));
  asm("lop3.b32 %0, %1, 0x000F000F, 0x43004300, 0xEA;" : "=r"(d1) : "r"(w >> 4));
  asm("lop3.b32 %0, %1, 0x000F000F, 0x43004300, 0xEA;" : "=r"(d2) : "r"(w >> 8));
  asm("lop3.b32 %0, %1, 0x000F000F, 0x43004300, 0xEA;" : "=r"(d3) : "r"(w >> 12));
  const uint32_t one = 0x3F803F80u, offset = 0xC308C308u;
  asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(d0) : "r"(one), "r"(offset));
  asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(d1) : "r"(one), "r"(offset));
  asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(d2) : "r"(one), "r"(offset));
  asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(d3) : "r"(one), "r"(offset));
}

// int8, stored as q + 128: one byte permute puts two bytes under fp16's exponent (1024 + u), minus 1152 leaves q. A
// slice takes two words, d0 and d1 from the first (bytes 0, 1 and 2, 3), d2 and d3 from the second.
__device__ __forceinline__ void dequant8(uint32_t w, uint32_t& lo, uint32_t& hi) {
  asm("prmt.b32 %0, %1, 0x64646464, 0x4140;" : "=r"(lo) : "r"(w));
  asm("prmt.b32 %0, %1, 0x64646464, 0x4342;" : "=r"(hi) : "r"(w));
  const uint32_t magic = 0x64806480u;
  asm("sub.f16x2 %0, %0, %1;" : "+r"(lo) : "r"(magic));
  asm("sub.f16x2 %0, %0, %1;" : "+r"(hi) : "r"(magic));
}

// c += A B for one k16 slice (k: the instruction's index in the slice; gemv says which k of the group it takes):
// A = one word's weights (a0: feature g, k 2q, 2q + 1; a1: feature g + 8; a2, a3: k + 8), B = x (b0: k 2q, 2q + 1
// of batch row g; b1: k 2q + 8, 2q + 9)
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same<T, half>::value)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void store(half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Weights are read once: past L1 (no_allocate), which keeps x and the scales, read by several lanes. A load that is
// off (a group past the warp's last) does not issue and leaves v undefined.
__device__ __forceinline__ uint4 load_once(const uint4* p, bool on) {
  uint4 v;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n @p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"((int)on));
  return v;
}

// One group's loads for a warp's TW tiles: per tile V uint4 of weights and the scales of features g and g + 8.
template <int TW, int V>
__device__ __forceinline__ void load_group(uint4 (&w)[TW][V], float (&s)[TW][2], const uint4* wp, const float* sp,
                                           bool on) {
#pragma unroll
  for (int t = 0; t < TW; ++t) {
#pragma unroll
    for (int v = 0; v < V; ++v) w[t][v] = load_once(wp + (t * V + v) * 32, on);
    s[t][0] = __ldg(sp + t * 16);
    s[t][1] = __ldg(sp + t * 16 + 8);
  }
}

// Block: KW warps over the same TW tiles of 16 output features, each warp `groups` groups of 128 along K (a multiple
// of STAGES) in turn; grid (N / (16 TW), splits). The block's warps add their sums in shared memory; splits > 1
// divides K among blocks too, which add theirs with atomics. wq: per (group, tile) V = BITS / 2 runs of 32 uint4,
// lane l's words 4v .. 4v + 3 at l of run v, so that each load of a warp reads 512 contiguous bytes; W4: word s is
// the k16 slice s of the group; W8: words 2s and 2s + 1 are. The weights and scales of STAGES groups are in flight
// while one is multiplied; the block's slice of x sits in shared memory. Along K, lane q's registers of slice s
// take x[32 q + 4 s .. + 3] of the group (pack_mma orders the weights to match), so a lane reads its x as four
// uint4.
template <typename T, int BITS, int TW, int KW, int STAGES>
__global__ void __launch_bounds__(KW * 32)
gemv(const T* __restrict__ x, const uint4* __restrict__ wq, const float* __restrict__ st, T* __restrict__ y,
     float* __restrict__ y32, int* __restrict__ cnt, int m, int n, int k, int groups) {
  extern __shared__ uint4 xs[];  // m rows of the block's K slice of x, KW * groups * 16 uint4 each
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int tile0 = blockIdx.x * TW, b0 = blockIdx.y * KW * groups, w0 = b0 + warp * groups;
  static_assert(BITS == 4 || std::is_same<T, half>::value, "W8 takes fp16 x");
  constexpr int V = BITS / 2;  // uint4 per lane, tile and group
  const size_t wstep = (size_t)(n / 16) * 32 * V;  // uint4 per group
  const uint4* wp = wq + (size_t)w0 * wstep + tile0 * 32 * V + lane;
  const float* sp = st + (size_t)w0 * n + tile0 * 16 + g;
  uint4 wb[STAGES][TW][V];
  float sb[STAGES][TW][2];
#pragma unroll
  for (int d = 0; d < STAGES; ++d) load_group<TW, V>(wb[d], sb[d], wp + d * wstep, sp + d * n, true);
  const int row16 = KW * groups * 16;
  for (int i = threadIdx.x; i < m * row16; i += KW * 32) {
    const int r = i / row16;
    xs[i] = __ldg(reinterpret_cast<const uint4*>(x + (size_t)r * k + (size_t)b0 * 128) + (i - r * row16));
  }
  __syncthreads();
  // rows >= m read row 0; their outputs are dropped
  const uint4* xl = xs + (g < m ? g : 0) * row16 + warp * groups * 16 + q * 4;
  float acc[TW][4] = {};
  for (int it = 0; it < groups; it += STAGES) {
#pragma unroll
    for (int d = 0; d < STAGES; ++d) {
      uint4 cur[TW][V];
      float cs[TW][2];
#pragma unroll
      for (int t = 0; t < TW; ++t) {
#pragma unroll
        for (int v = 0; v < V; ++v) cur[t][v] = wb[d][t][v];
        cs[t][0] = sb[d][t][0];
        cs[t][1] = sb[d][t][1];
      }
      const int ahead = it + d + STAGES, last = groups - 1;  // past the last group: scales reread, no weights
      load_group<TW, V>(wb[d], sb[d], wp + ahead * wstep, sp + (size_t)min(ahead, last) * n, ahead <= last);
      const uint4* xg = xl + (it + d) * 16;
      const uint4 v0 = xg[0], v1 = xg[1], v2 = xg[2], v3 = xg[3];
      const uint32_t xw[16] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w,
                               v2.x, v2.y, v2.z, v2.w, v3.x, v3.y, v3.z, v3.w};
#pragma unroll
  // --8<-- [start:loop]
      for (int t = 0; t < TW; ++t) {
        float c[4] = {0.f, 0.f, 0.f, 0.f};
        uint32_t w[4 * V];
#pragma unroll
        for (int v = 0; v < V; ++v) {
          w[4 * v] = cur[t][v].x;
          w[4 * v + 1] = cur[t][v].y;
          w[4 * v + 2] = cur[t][v].z;
          w[4 * v + 3] = cur[t][v].w;
        }
#pragma unroll
        for (int s = 0; s < 8; ++s) {
          uint32_t d0, d1, d2, d3;
          if constexpr (BITS == 8) {
            dequant8(w[2 * s], d0, d1);
            dequant8(w[2 * s + 1], d2, d3);
          } else if constexpr (std::is_same<T, half>::value) {
            dequant(w[s], d0, d1, d2, d3);
          } else {
            dequant_bf16(w[s], d0, d1, d2, d3);
          }
          mma<T>(c, d0, d1, d2, d3, xw[2 * s], xw[2 * s + 1]);
        }
        acc[t][0] += c[0] * cs[t][0];  // feature g, batch rows 2q and 2q + 1
        acc[t][1] += c[1] * cs[t][0];
        acc[t][2] += c[2] * cs[t][1];  // feature g + 8
        acc[t][3] += c[3] * cs[t][1];
      }
  // --8<-- [end:loop]
    }
  }
  if (KW > 1) {  // warp 0 adds the other warps' sums, in the shared memory x is done with
    float* part = reinterpret_cast<float*>(xs);  // [KW][TW][4][32]
    __syncthreads();
#pragma unroll
    for (int t = 0; t < TW; ++t)
#pragma unroll
      for (int r = 0; r < 4; ++r) part[((warp * TW + t) * 4 + r) * 32 + lane] = acc[t][r];
    __syncthreads();
#pragma unroll
    for (int w = 1; w < KW; ++w)
#pragma unroll
      for (int t = 0; t < TW; ++t)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[t][r] += part[((w * TW + t) * 4 + r) * 32 + lane];
  }
  const bool lead = warp == 0;
  // c[r] is feature g + 8 (r / 2) of batch row 2q + r % 2
  if (gridDim.y == 1) {
    if (!lead) return;
#pragma unroll
    for (int t = 0; t < TW; ++t)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if (2 * q + r % 2 < m)
          store(y + (size_t)(2 * q + r % 2) * n + (tile0 + t) * 16 + g + 8 * (r / 2), acc[t][r]);
    return;
  }
  // split-K: fp32 sums by atomics; the column block's last split writes y and re-zeroes the sums and its counter
  if (lead)
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
  if (!last || !lead) return;
  __threadfence();
#pragma unroll
  for (int t = 0; t < TW; ++t)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (2 * q + r % 2 < m) {
        const size_t i = (size_t)(2 * q + r % 2) * n + (tile0 + t) * 16 + g + 8 * (r / 2);
        store(y + i, __ldcg(y32 + i));
        y32[i] = 0.f;
      }
  if (threadIdx.x == 0) cnt[blockIdx.x] = 0;
}

}  // namespace w4mma

namespace w4mma {

template <typename T, int BITS, int TW, int KW, int STAGES>
cudaError_t launch(const void* x, const void* wq, const float* st, void* y, float* y32, int* cnt, int m, int n, int k,
                   int splits, cudaStream_t stream) {
  const int groups = k / 128 / splits / KW;  // per warp
  const int smem = max(m * (k / splits) * 2, KW * TW * 4 * 32 * 4);  // the slice of x, then the warps' sums
  if (m < 1 || m > 8 || n % (16 * TW) || k % (128 * splits * KW) || groups % STAGES) return cudaErrorInvalidValue;
  auto* f = gemv<T, BITS, TW, KW, STAGES>;
  if (smem > 47 * 1024) {  // 48 KB without opting in, the static `last` flag included
    const cudaError_t err = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
  }
  f<<<dim3(n / (16 * TW), splits), 32 * KW, smem, stream>>>(static_cast<const T*>(x), static_cast<const uint4*>(wq),
                                                               st, static_cast<T*>(y), y32, cnt, m, n, k, groups);
  return cudaGetLastError();
}

}  // namespace w4mma

// y [m, n] = x [m, k] (fp16, or bf16 if bf16 and bits = 4; m <= 8) times the packed W4 or W8 weights; y32 [m, n]
// fp32 and cnt [n / 16] int32 kept zero
extern "C" cudaError_t w4_mma_gemv(const void* x, const void* wq, const float* st, void* y, float* y32, int* cnt,
                                   int m, int n, int k, int bits, int bf16, int tw, int kw, int stages, int splits,
                                   cudaStream_t stream) {
#define W_ARGS x, wq, st, y, y32, cnt, m, n, k, splits, stream
#define W4_CASE(TW, KW, STAGES)                                                                       \
  if (bits == 4 && tw == TW && kw == KW && stages == STAGES)                                          \
    return bf16 ? w4mma::launch<__nv_bfloat16, 4, TW, KW, STAGES>(W_ARGS)                             \
                : w4mma::launch<half, 4, TW, KW, STAGES>(W_ARGS);
#define W8_CASE(TW, KW, STAGES)                                                                       \
  if (bits == 8 && !bf16 && tw == TW && kw == KW && stages == STAGES)                                 \
    return w4mma::launch<half, 8, TW, KW, STAGES>(W_ARGS);
  W4_CASE(1, 8, 2) W4_CASE(2, 8, 1) W4_CASE(2, 8, 2)
  W8_CASE(1, 8, 2) W8_CASE(2, 8, 1) W8_CASE(2, 8, 2)
#undef W4_CASE
#undef W8_CASE
#undef W_ARGS
  return cudaErrorInvalidConfiguration;
}
