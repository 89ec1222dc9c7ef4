// Step 1: TMA loads into shared memory, wgmma from shared memory, one warpgroup, no pipeline.
//
// One CTA = one warpgroup (128 threads) computes a 64 x 128 tile of C. For every 64-wide slab of K:
// thread 0 arms the mbarrier with the bytes to expect and issues two TMA copies (A: 64 x 64, B: 128 x 64);
// everybody waits for the barrier's phase to complete; the warpgroup runs four wgmma m64n128k16 on the
// slab; then a __syncthreads() before the buffer may be overwritten. Load and math never overlap.
#include "hopper.cuh"

namespace hgemm {
namespace step1 {

constexpr int BM = 64, BN = 128;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;

struct __align__(1024) Smem {  // 128-byte swizzled tiles must start on 1024-byte boundaries
  __nv_bfloat16 a[BM * BK];
  __nv_bfloat16 b[BN * BK];
  uint64_t full;
};

__global__ void __launch_bounds__(WARPGROUP) kernel(const __grid_constant__ CUtensorMap tm_a,
                                                    const __grid_constant__ CUtensorMap tm_b, __nv_bfloat16* c,
                                                    Problem p) {
  extern __shared__ unsigned char smem_raw[];
  Smem& s = aligned_smem<Smem>(smem_raw);
  const int tid = threadIdx.x;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;

  if (tid == 0) {
    mbar_init(&s.full, 1);  // one arrival (thread 0's arrive.expect_tx) + the bytes of A and B
    fence_barrier_init();
  }
  __syncthreads();

  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;

  const int k_tiles = (p.k + BK - 1) / BK;  // the last slab may run past K: TMA fills it with zeros
  for (int kt = 0; kt < k_tiles; ++kt) {
    if (tid == 0) {
      mbar_arrive_expect_tx(&s.full, A_BYTES + B_BYTES);
      tma_load_2d(s.a, &tm_a, &s.full, kt * BK, row0);
      tma_load_2d(s.b, &tm_b, &s.full, kt * BK, col0);
    }
    mbar_wait(&s.full, kt & 1);  // phase kt completes when the arrival and all the bytes are in

    wgmma_fence();
    wgmma_tile<BN>(d, smem_desc_sw128(s.a), smem_desc_sw128(s.b));
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(d);
    __syncthreads();  // every warp is done reading the slab before thread 0 refills it
  }
  store_accumulators<BN>(d, c, p, row0, col0, tid);
}

}  // namespace step1
}  // namespace hgemm

// C = A * B^T for bf16 A [M, K], B [N, K], C [M, N] (row-major device pointers, K and N multiples of 8).
// extern "C": the same launcher serves the torch extension (hopper.py) and a plain ctypes caller.
extern "C" cudaError_t hgemm_step1(const void* a, const void* b, void* c, int m, int n, int k, cudaStream_t stream) {
  using namespace hgemm;
  const Problem p{m, n, k};
  const int smem = smem_bytes<step1::Smem>();
  CUtensorMap tm_a, tm_b;
  const cudaError_t err = prepare_launch(step1::kernel, smem, a, b, c, p, step1::BM, step1::BN, &tm_a, &tm_b);
  if (err != cudaSuccess) return err;
  const dim3 grid((n + step1::BN - 1) / step1::BN, (m + step1::BM - 1) / step1::BM);
  step1::kernel<<<grid, WARPGROUP, smem, stream>>>(tm_a, tm_b, static_cast<__nv_bfloat16*>(c), p);
  return cudaGetLastError();
}
