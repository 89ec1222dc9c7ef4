// Step 3: warp specialisation. One producer warpgroup, two consumer warpgroups, setmaxnreg.
//
// Delta from step 2: the roles are split by warpgroup instead of by "thread 0 also loads".
//   warpgroup 0 (producer): gives registers back (setmaxnreg.dec to 40); one thread runs the load loop:
//       wait empty[s] -> arrive.expect_tx(full[s], bytes) -> two TMA copies. It never touches the data.
//   warpgroups 1, 2 (consumers): take the registers (setmaxnreg.inc to 232); each owns 64 rows of a
//       128 x 256 tile (wgmma m64n256k16, 128 fp32 accumulators per thread): wait full[s] -> wgmma ->
//       arrive empty[s].
// The larger tile (128 x 256 instead of 64 x 128) halves the shared-memory traffic per FLOP; it fits
// because the consumers get 232 registers: 128 x 40 + 256 x 232 = 64512 <= 65536 per SM.
#include "hopper.cuh"

namespace hgemm {
namespace step3 {

constexpr int CONSUMERS = 2, BM = 64 * CONSUMERS, BN = 256, STAGES = 4;
constexpr int THREADS = WARPGROUP * (1 + CONSUMERS);
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
constexpr int PRODUCER_REGS = 40, CONSUMER_REGS = 232;

struct Smem {
  __nv_bfloat16 a[STAGES][BM * BK];  // 16 KiB per stage
  __nv_bfloat16 b[STAGES][BN * BK];  // 32 KiB per stage
  uint64_t full[STAGES], empty[STAGES];
};

// __launch_bounds__(384, 1) fixes the register count at launch (at most 65536 / 384 -> 168), which
// setmaxnreg needs: without a known count ptxas ignores it (warning C7508).
__global__ void __launch_bounds__(THREADS, 1) kernel(const __grid_constant__ CUtensorMap tm_a,
                                                     const __grid_constant__ CUtensorMap tm_b, __nv_bfloat16* c,
                                                     Problem p) {
  extern __shared__ unsigned char smem_raw[];
  Smem& s = aligned_smem<Smem>(smem_raw);
  const int tid = threadIdx.x, warpgroup = tid / WARPGROUP, lane = tid % 32;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  const int k_tiles = (p.k + BK - 1) / BK;

  if (tid == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&s.full[i], 1);
      mbar_init(&s.empty[i], CONSUMERS * WARPGROUP / 32);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  // --8<-- [start:roles]
  if (warpgroup == 0) {  // ---------------- producer
    setmaxnreg_dec<PRODUCER_REGS>();
    if (tid == 0) {
      tma_prefetch_descriptor(&tm_a);
      tma_prefetch_descriptor(&tm_b);
      for (int kt = 0; kt < k_tiles; ++kt) {
        const int stage = kt % STAGES;
        mbar_wait(&s.empty[stage], ((kt / STAGES) & 1) ^ 1);  // first round: passes at once
        mbar_arrive_expect_tx(&s.full[stage], A_BYTES + B_BYTES);
        tma_load_2d(s.a[stage], &tm_a, &s.full[stage], kt * BK, row0);
        tma_load_2d(s.b[stage], &tm_b, &s.full[stage], kt * BK, col0);
      }
    }
  } else {  // ---------------- consumers
    setmaxnreg_inc<CONSUMER_REGS>();
    const int consumer = warpgroup - 1;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;

    for (int kt = 0; kt < k_tiles; ++kt) {
      const int stage = kt % STAGES;
      mbar_wait(&s.full[stage], (kt / STAGES) & 1);
      wgmma_fence();
      wgmma_tile<BN>(d, smem_desc_sw128(s.a[stage] + consumer * 64 * BK), smem_desc_sw128(s.b[stage]));
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(d);
      __syncwarp();
      if (lane == 0) mbar_arrive(&s.empty[stage]);
    }
    store_accumulators<BN>(d, c, p, row0 + 64 * consumer, col0, tid % WARPGROUP);
  }
  // --8<-- [end:roles]
}

}  // namespace step3
}  // namespace hgemm

extern "C" cudaError_t hgemm_step3(const void* a, const void* b, void* c, int m, int n, int k, cudaStream_t stream) {
  using namespace hgemm;
  const Problem p{m, n, k};
  const int smem = smem_bytes<step3::Smem>();
  CUtensorMap tm_a, tm_b;
  const cudaError_t err = prepare_launch(step3::kernel, smem, a, b, c, p, step3::BM, step3::BN, &tm_a, &tm_b);
  if (err != cudaSuccess) return err;
  const dim3 grid((n + step3::BN - 1) / step3::BN, (m + step3::BM - 1) / step3::BM);
  step3::kernel<<<grid, step3::THREADS, smem, stream>>>(tm_a, tm_b, static_cast<__nv_bfloat16*>(c), p);
  return cudaGetLastError();
}
