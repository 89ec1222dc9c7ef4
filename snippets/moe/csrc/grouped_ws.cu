// The MoE experts' matmul in one launch, built on the Hopper GEMM lab's step 5 (persistent, one producer and
// two consumer warpgroups, TMA loads, TMA-store epilogue): Y[rows of e] = X[rows of e] @ W[e] for every
// expert e. X [tokens, K] is sorted by expert. W is stored as [experts * N, K]: each expert's matrix
// transposed, K-major, the layout wgmma reads B in. A host-side schedule lists one (expert, first row) per
// 128-row tile, so experts with no tokens take no tile.
//
// Delta from step 5 (included below, so its constants, shared-memory layout and epilogue staging are the
// same code): the tile's expert picks the rows of W that B is loaded from, and the epilogue stops at the
// expert's last token. A tile that runs past that token has loaded and multiplied the next expert's rows;
// a 64-row block wholly inside the expert leaves through TMA, a block cut by the expert's end through
// per-thread stores that stop at it, and a block wholly past it is not stored.
#include "step5_tma_store.cu"

namespace hgemm {
namespace grouped {

using namespace step5;  // BM, BN, STAGES, THREADS, A_BYTES, B_BYTES, C_BOX, Smem, stage_accumulators, ...
constexpr int GROUP = 16;  // tile rows walked column by column: one expert's W is larger than L2

struct Schedule {
  const int* tile_expert;  // [row_tiles]: the expert of each 128-row tile
  const int* tile_row;     // [row_tiles]: its first row of X
  const int* offs;         // [experts + 1]: expert e owns rows offs[e] .. offs[e + 1] - 1
  int row_tiles;
};

__global__ void __launch_bounds__(THREADS, 1) kernel(const __grid_constant__ CUtensorMap tm_x,
                                                     const __grid_constant__ CUtensorMap tm_w,
                                                     const __grid_constant__ CUtensorMap tm_y, __nv_bfloat16* y,
                                                     Problem p, Schedule sched) {
  extern __shared__ unsigned char smem_raw[];
  Smem& s = aligned_smem<Smem>(smem_raw);
  const int tid = threadIdx.x, warpgroup = tid / WARPGROUP, lane = tid % 32;
  const int k_tiles = (p.k + BK - 1) / BK;
  const int tiles_n = (p.n + BN - 1) / BN, tiles = sched.row_tiles * tiles_n;

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
      tma_prefetch_descriptor(&tm_x);
      tma_prefetch_descriptor(&tm_w);
      int it = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const TileCoord tile = grouped_tile(t, sched.row_tiles, tiles_n, GROUP);
        const int row0 = sched.tile_row[tile.m], w_row0 = sched.tile_expert[tile.m] * p.n + tile.n * BN;
        for (int kt = 0; kt < k_tiles; ++kt, ++it) {
          const int stage = it % STAGES;
          mbar_wait(&s.empty[stage], ((it / STAGES) & 1) ^ 1);
          mbar_arrive_expect_tx(&s.full[stage], A_BYTES + B_BYTES);
          tma_load_2d(s.a[stage], &tm_x, &s.full[stage], kt * BK, row0);
          tma_load_2d(s.b[stage], &tm_w, &s.full[stage], kt * BK, w_row0);  // past N: the next expert's rows
        }
      }
    }
  } else {  // ---------------- consumers
    setmaxnreg_inc<CONSUMER_REGS>();
    const int consumer = warpgroup - 1, thread_in_wg = tid % WARPGROUP;
    const int epilogue_barrier = 1 + consumer;
    float d[BN / 2];
    int it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const TileCoord tile = grouped_tile(t, sched.row_tiles, tiles_n, GROUP);
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
      const int block = sched.tile_row[tile.m] + 64 * consumer;  // this consumer's 64 rows
      const int end = sched.offs[sched.tile_expert[tile.m] + 1];
      if (block + 64 <= end) {  // wholly inside the expert: TMA store, as in step 5
        if (thread_in_wg == 0) tma_store_wait_read();
        named_barrier_sync(epilogue_barrier, WARPGROUP);
        stage_accumulators(d, s.c[consumer], thread_in_wg);
        fence_proxy_async_smem();
        named_barrier_sync(epilogue_barrier, WARPGROUP);
        if (thread_in_wg == 0) {
#pragma unroll
          for (int box = 0; box < BN / C_BOX; ++box)
            tma_store_2d(&tm_y, s.c[consumer][box], tile.n * BN + box * C_BOX, block);
          tma_store_commit();
        }
      } else if (block < end) {  // cut by the expert's end: rows up to `end` only
        store_accumulators<BN>(d, y, Problem{end, p.n, p.k}, block, tile.n * BN, thread_in_wg);
      }
    }
    if (thread_in_wg == 0) tma_store_wait_all();
  }
}

}  // namespace grouped
}  // namespace hgemm

extern "C" cudaError_t moe_grouped_gemm(const void* x, const void* w, void* y, const int* tile_expert,
                                        const int* tile_row, const int* offs, int row_tiles, int tokens, int n,
                                        int k, int experts, cudaStream_t stream) {
  using namespace hgemm;
  const Problem p{tokens, n, k};
  if (!tma_compatible(x, w, y, p)) return cudaErrorInvalidValue;
  const int smem = smem_bytes<step5::Smem>();
  CUtensorMap tm_x, tm_w, tm_y;
  cudaError_t err = make_tensor_map(&tm_x, x, tokens, k, step5::BM, BK, true);
  if (err == cudaSuccess) err = make_tensor_map(&tm_w, w, experts * n, k, step5::BN, BK, true);
  if (err == cudaSuccess) err = make_tensor_map(&tm_y, y, tokens, n, 64, step5::C_BOX, true);
  if (err == cudaSuccess)
    err = cudaFuncSetAttribute(grouped::kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const int tiles = row_tiles * ((n + step5::BN - 1) / step5::BN);
  int ctas = 0;
  if (err == cudaSuccess) err = persistent_grid(tiles, &ctas);
  if (err != cudaSuccess || tiles == 0) return err;
  grouped::kernel<<<ctas, step5::THREADS, smem, stream>>>(tm_x, tm_w, tm_y, static_cast<__nv_bfloat16*>(y), p,
                                                         grouped::Schedule{tile_expert, tile_row, offs, row_tiles});
  return cudaGetLastError();
}
