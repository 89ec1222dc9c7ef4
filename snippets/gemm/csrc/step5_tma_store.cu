// Step 5: a TMA-store epilogue (on top of the persistent kernel of step 4).
//
// Delta from step 4: the consumers no longer write C with per-thread global stores (each thread writes
// 4-byte pieces scattered over 16 rows). Each consumer warpgroup writes its 64 x 256 block as bf16 into
// its own shared-memory buffer, in the same 128-byte-swizzled layout TMA uses (so the writes are free of
// bank conflicts), then one thread hands the block to the TMA unit as four 64 x 64 bulk stores, which
// clip at the edges of C. The store runs while the warpgroup starts on its next tile: the buffer is only
// waited for (wait_group.read) when it is about to be rewritten. The C buffers take 64 KiB of shared
// memory, so the pipeline has 3 stages instead of 4 (3 x 48 + 64 = 208 KiB of the 227 KiB).
#include "hopper.cuh"

namespace hgemm {
namespace step5 {

constexpr int CONSUMERS = 2, BM = 64 * CONSUMERS, BN = 256, STAGES = 3, GROUP_M = 8;
constexpr int THREADS = WARPGROUP * (1 + CONSUMERS);
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;
constexpr int C_BOX = 64;  // a 64 x 64 bf16 box: 128-byte rows, the widest the 128-byte swizzle allows

struct Smem {
  __nv_bfloat16 a[STAGES][BM * BK];
  __nv_bfloat16 b[STAGES][BN * BK];
  __nv_bfloat16 c[CONSUMERS][BN / C_BOX][64 * C_BOX];  // per consumer: four 64 x 64 boxes, 8 KiB each
  uint64_t full[STAGES], empty[STAGES];
};

// Byte offset of element (row, col) of a 64 x 64 bf16 box stored with 128-byte swizzle: the 16-byte
// chunk col / 8 of row r lands in chunk (col / 8) ^ (r % 8).
__device__ __forceinline__ int swizzled_offset(int row, int col) {
  return row * 128 + ((((col >> 3) ^ row) & 7) << 4) + (col & 7) * 2;
}

__device__ __forceinline__ void stage_accumulators(const float (&d)[BN / 2], __nv_bfloat16 (*cbuf)[64 * C_BOX],
                                                   int thread_in_wg) {
  const int warp = thread_in_wg / 32, lane = thread_in_wg % 32;
  const int r = warp * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = 8 * j + 2 * (lane % 4);  // column within the 64 x 256 block
    unsigned char* box = reinterpret_cast<unsigned char*>(cbuf[col / C_BOX]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = r + 8 * half;
      *reinterpret_cast<__nv_bfloat162*>(box + swizzled_offset(row, col % C_BOX)) =
          __floats2bfloat162_rn(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
    }
  }
}

__global__ void __launch_bounds__(THREADS, 1) kernel(const __grid_constant__ CUtensorMap tm_a,
                                                     const __grid_constant__ CUtensorMap tm_b,
                                                     const __grid_constant__ CUtensorMap tm_c, Problem p) {
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

  if (warpgroup == 0) {  // ---------------- producer (as in step 4)
    setmaxnreg_dec<PRODUCER_REGS>();
    if (tid == 0) {
      tma_prefetch_descriptor(&tm_a);
      tma_prefetch_descriptor(&tm_b);
      int it = 0;
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
    const int consumer = warpgroup - 1, thread_in_wg = tid % WARPGROUP;
    const int epilogue_barrier = 1 + consumer;  // hardware barrier 0 is __syncthreads'
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
      // epilogue: the previous tile's stores must have read the buffer before it is overwritten
      if (thread_in_wg == 0) tma_store_wait_read();
      named_barrier_sync(epilogue_barrier, WARPGROUP);
      stage_accumulators(d, s.c[consumer], thread_in_wg);
      fence_proxy_async_smem();  // make the generic-proxy writes visible to the TMA unit
      named_barrier_sync(epilogue_barrier, WARPGROUP);
      if (thread_in_wg == 0) {
        const int row = tile.m * BM + 64 * consumer;
#pragma unroll
        for (int box = 0; box < BN / C_BOX; ++box)
          tma_store_2d(&tm_c, s.c[consumer][box], tile.n * BN + box * C_BOX, row);
        tma_store_commit();
      }
    }
    if (thread_in_wg == 0) tma_store_wait_all();
  }
}

}  // namespace step5
}  // namespace hgemm

extern "C" cudaError_t hgemm_step5(const void* a, const void* b, void* c, int m, int n, int k, cudaStream_t stream) {
  using namespace hgemm;
  const Problem p{m, n, k};
  const int smem = smem_bytes<step5::Smem>();
  CUtensorMap tm_a, tm_b, tm_c;
  cudaError_t err = prepare_launch(step5::kernel, smem, a, b, c, p, step5::BM, step5::BN, &tm_a, &tm_b);
  if (err == cudaSuccess) err = make_tensor_map(&tm_c, c, m, n, 64, step5::C_BOX, true);
  const int tiles = ((m + step5::BM - 1) / step5::BM) * ((n + step5::BN - 1) / step5::BN);
  int ctas = 0;
  if (err == cudaSuccess) err = persistent_grid(tiles, &ctas);
  if (err != cudaSuccess) return err;
  step5::kernel<<<ctas, step5::THREADS, smem, stream>>>(tm_a, tm_b, tm_c, p);
  return cudaGetLastError();
}
