// Step 4: a persistent kernel with a tile scheduler.
//
// Delta from step 3: one CTA per SM (grid = number of SMs, or fewer tiles) instead of one CTA per tile.
// Each CTA walks the tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... in grouped order (tile_order.cuh):
// GROUP_M tile rows are swept column by column, so the tiles in flight at one time share their A rows and
// B columns in L2. Producer and consumers walk the same list; the stage index and phase run on across
// tiles, so while the consumers write one tile's C the producer is already loading the next tile's slabs.
#include "hopper.cuh"

namespace hgemm {
namespace step4 {

constexpr int CONSUMERS = 2, BM = 64 * CONSUMERS, BN = 256, STAGES = 4, GROUP_M = 8;
constexpr int THREADS = WARPGROUP * (1 + CONSUMERS);
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;

struct Smem {
  __nv_bfloat16 a[STAGES][BM * BK];
  __nv_bfloat16 b[STAGES][BN * BK];
  uint64_t full[STAGES], empty[STAGES];
};

__global__ void __launch_bounds__(THREADS, 1) kernel(const __grid_constant__ CUtensorMap tm_a,
                                                     const __grid_constant__ CUtensorMap tm_b, __nv_bfloat16* c,
                                                     Problem p) {
  extern __shared__ unsigned char smem_raw[];
  Smem& s = aligned_smem<Smem>(smem_raw);
  const int tid = threadIdx.x, warpgroup = tid / WARPGROUP, lane = tid % 32;
  const int k_tiles = (p.k + BK - 1) / BK;
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN, tiles = tiles_m * tiles_n;

  if (tid == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&s.full[i], 1);
      mbar_init(&s.empty[i], CONSUMERS * WARPGROUP / 32);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {  // ---------------- producer
    setmaxnreg_dec<PRODUCER_REGS>();
    if (tid == 0) {
      tma_prefetch_descriptor(&tm_a);
      tma_prefetch_descriptor(&tm_b);
      int it = 0;  // slabs loaded so far by this CTA, over all its tiles
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const TileCoord tile = grouped_tile(t, tiles_m, tiles_n, GROUP_M);
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const int stage = it % STAGES;
          mbar_wait(&s.empty[stage], ((it / STAGES) & 1) ^ 1);
          mbar_arrive_expect_tx(&s.full[stage], A_BYTES + B_BYTES);
          tma_load_2d(s.a[stage], &tm_a, &s.full[stage], kt * BK, tile.m * BM);
          tma_load_2d(s.b[stage], &tm_b, &s.full[stage], kt * BK, tile.n * BN);
        }
      }
    }
  } else {  // ---------------- consumers
    setmaxnreg_inc<CONSUMER_REGS>();
    const int consumer = warpgroup - 1;
    float d[BN / 2];
    int it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const TileCoord tile = grouped_tile(t, tiles_m, tiles_n, GROUP_M);
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int stage = it % STAGES;
        mbar_wait(&s.full[stage], (it / STAGES) & 1);
        wgmma_fence();
        wgmma_tile<BN>(d, smem_desc_sw128(s.a[stage] + consumer * 64 * BK), smem_desc_sw128(s.b[stage]));
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators(d);
        __syncwarp();
        if (lane == 0) mbar_arrive(&s.empty[stage]);
      }
      store_accumulators<BN>(d, c, p, tile.m * BM + 64 * consumer, tile.n * BN, tid % WARPGROUP);
    }
  }
}

}  // namespace step4
}  // namespace hgemm

extern "C" cudaError_t hgemm_step4(const void* a, const void* b, void* c, int m, int n, int k, cudaStream_t stream) {
  using namespace hgemm;
  const Problem p{m, n, k};
  const int smem = smem_bytes<step4::Smem>();
  CUtensorMap tm_a, tm_b;
  cudaError_t err = prepare_launch(step4::kernel, smem, a, b, c, p, step4::BM, step4::BN, &tm_a, &tm_b);
  const int tiles = ((m + step4::BM - 1) / step4::BM) * ((n + step4::BN - 1) / step4::BN);
  int ctas = 0;
  if (err == cudaSuccess) err = persistent_grid(tiles, &ctas);
  if (err != cudaSuccess) return err;
  step4::kernel<<<ctas, step4::THREADS, smem, stream>>>(tm_a, tm_b, static_cast<__nv_bfloat16*>(c), p);
  return cudaGetLastError();
}
