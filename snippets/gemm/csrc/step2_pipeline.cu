// Step 2: a multi-stage pipeline with full/empty mbarriers (still one warpgroup, same 64 x 128 tile).
//
// Delta from step 1: STAGES buffers instead of one, and two barriers per buffer.
//   full[s]  : thread 0 arrives once with arrive.expect_tx(bytes of A + B) and issues the two TMA copies;
//              the TMA unit pays the bytes off (complete_tx) as the data lands. The phase completes when
//              the arrival AND all the bytes are in; consumers wait on it. Nobody "signals after the copy".
//   empty[s] : each warp arrives once when its wgmma on the buffer has finished; thread 0 waits on it
//              before it refills the buffer with the slab STAGES ahead.
// Loads for slabs kt+1 .. kt+STAGES-1 are in flight while slab kt is multiplied.
#include "hopper.cuh"

namespace hgemm {
namespace step2 {

constexpr int BM = 64, BN = 128, STAGES = 4;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2;
constexpr int CONSUMER_WARPS = WARPGROUP / 32;

struct Smem {
  __nv_bfloat16 a[STAGES][BM * BK];  // 8 KiB per stage: every stage starts on a 1024-byte boundary
  __nv_bfloat16 b[STAGES][BN * BK];  // 16 KiB per stage
  uint64_t full[STAGES], empty[STAGES];
};

__device__ __forceinline__ void issue_loads(Smem& s, int stage, int kt, const CUtensorMap* tm_a,
                                            const CUtensorMap* tm_b, int row0, int col0) {
  mbar_arrive_expect_tx(&s.full[stage], A_BYTES + B_BYTES);
  tma_load_2d(s.a[stage], tm_a, &s.full[stage], kt * BK, row0);
  tma_load_2d(s.b[stage], tm_b, &s.full[stage], kt * BK, col0);
}

__global__ void __launch_bounds__(WARPGROUP) kernel(const __grid_constant__ CUtensorMap tm_a,
                                                    const __grid_constant__ CUtensorMap tm_b, __nv_bfloat16* c,
                                                    Problem p) {
  extern __shared__ unsigned char smem_raw[];
  Smem& s = aligned_smem<Smem>(smem_raw);
  const int tid = threadIdx.x, lane = tid % 32;
  const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
  const int k_tiles = (p.k + BK - 1) / BK;

  if (tid == 0) {
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&s.full[i], 1);                // the producer's arrive.expect_tx (+ the bytes)
      mbar_init(&s.empty[i], CONSUMER_WARPS);  // one arrival per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (tid == 0) {  // prologue: every buffer starts empty, fill them all
    for (int kt = 0; kt < STAGES && kt < k_tiles; ++kt) issue_loads(s, kt, kt, &tm_a, &tm_b, row0, col0);
  }

  float d[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) d[i] = 0.f;

  for (int kt = 0; kt < k_tiles; ++kt) {
    const int stage = kt % STAGES;
    const uint32_t parity = (kt / STAGES) & 1;  // how many times this buffer has been filled before, mod 2
    mbar_wait(&s.full[stage], parity);

    wgmma_fence();
    wgmma_tile<BN>(d, smem_desc_sw128(s.a[stage]), smem_desc_sw128(s.b[stage]));
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(d);

    __syncwarp();
    if (lane == 0) mbar_arrive(&s.empty[stage]);  // this warp no longer reads the buffer

    if (tid == 0 && kt + STAGES < k_tiles) {  // refill the buffer with the slab STAGES ahead
      mbar_wait(&s.empty[stage], parity);      // all four warps have released it
      issue_loads(s, stage, kt + STAGES, &tm_a, &tm_b, row0, col0);
    }
  }
  store_accumulators<BN>(d, c, p, row0, col0, tid);
}

}  // namespace step2
}  // namespace hgemm

extern "C" cudaError_t hgemm_step2(const void* a, const void* b, void* c, int m, int n, int k, cudaStream_t stream) {
  using namespace hgemm;
  const Problem p{m, n, k};
  const int smem = smem_bytes<step2::Smem>();
  CUtensorMap tm_a, tm_b;
  const cudaError_t err = prepare_launch(step2::kernel, smem, a, b, c, p, step2::BM, step2::BN, &tm_a, &tm_b);
  if (err != cudaSuccess) return err;
  const dim3 grid((n + step2::BN - 1) / step2::BN, (m + step2::BM - 1) / step2::BM);
  step2::kernel<<<grid, WARPGROUP, smem, stream>>>(tm_a, tm_b, static_cast<__nv_bfloat16*>(c), p);
  return cudaGetLastError();
}
