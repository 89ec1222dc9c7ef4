// Hopper (sm_90a) building blocks shared by the GEMM steps: TMA tensor maps (host), mbarriers, TMA
// loads and stores, wgmma descriptors and fences, setmaxnreg, and the tile order of the persistent steps.
// Every device wrapper is one PTX instruction (or a tiny loop around one) so that the kernels read like
// the PTX ISA's own description of the handshake.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums only: the driver function is fetched at run time (no -lcuda)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "tile_order.cuh"
#include "wgmma_bf16.cuh"

namespace hgemm {

// C = A * B^T. A is [M, K], B is [N, K], C is [M, N]; all row-major bf16, so A and B are both K-major.
struct Problem {
  int m, n, k;
};

constexpr int BK = 64;            // K per stage: 64 bf16 = 128 bytes, one 128-byte swizzle row
constexpr int WGMMA_K = 16;       // K of one wgmma instruction (bf16)
constexpr int WARPGROUP = 128;    // threads in a warpgroup (4 consecutive warps)

// ------------------------------------------------------------------------------------------------
// Host: tensor maps
// ------------------------------------------------------------------------------------------------

// cuTensorMapEncodeTiled lives in the driver (libcuda). Asking the runtime for the entry point keeps the
// extension free of a -lcuda link; the 12000 pins the ABI version of the function we call.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      ptr = nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(ptr);
  }();
  return fn;
}

// A 2-D tensor map over a row-major bf16 matrix [rows, cols]; one TMA copy moves a box of
// box_rows x box_cols. With 128-byte swizzle box_cols must be 64 (128 bytes). Loads past the edge of
// the matrix are filled with zeros; stores past the edge are dropped.
inline cudaError_t make_tensor_map(CUtensorMap* map, const void* base, int rows, int cols, int box_rows,
                                   int box_cols, bool swizzle_128b) {
  const EncodeTiledFn encode = encode_tiled_fn();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};  // innermost first
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * sizeof(__nv_bfloat16)};     // bytes, dim 1
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            swizzle_128b ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

// TMA needs 16-byte aligned bases and row strides that are multiples of 16 bytes (8 bf16).
inline bool tma_compatible(const void* a, const void* b, const void* c, Problem p) {
  auto aligned = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  return p.m > 0 && p.n > 0 && p.k > 0 && p.k % 8 == 0 && p.n % 8 == 0 && aligned(a) && aligned(b) && aligned(c);
}

// What every step's launcher does first: check the operands, build the A and B tensor maps for a BM x BN
// tile, and allow the kernel `smem` bytes of dynamic shared memory.
template <class Kernel>
inline cudaError_t prepare_launch(Kernel kernel, int smem, const void* a, const void* b, const void* c, Problem p,
                                  int bm, int bn, CUtensorMap* tm_a, CUtensorMap* tm_b) {
  if (!tma_compatible(a, b, c, p)) return cudaErrorInvalidValue;
  cudaError_t err = make_tensor_map(tm_a, a, p.m, p.k, bm, BK, true);
  if (err == cudaSuccess) err = make_tensor_map(tm_b, b, p.n, p.k, bn, BK, true);
  if (err == cudaSuccess) err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  return err;
}

// A persistent kernel's grid: one CTA per SM, or one per tile when there are fewer tiles.
inline cudaError_t persistent_grid(int tiles, int* ctas) {
  int device = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  *ctas = tiles < sms ? tiles : sms;
  return err;
}

// ------------------------------------------------------------------------------------------------
// Device: shared memory, mbarriers
// ------------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// The dynamic shared-memory window is only guaranteed 16-byte alignment; 128-byte swizzled tiles need 1024.
// Launchers ask for sizeof(T) + 1024 bytes and kernels place T on the first 1024-byte boundary.
template <class T>
__device__ __forceinline__ T& aligned_smem(unsigned char* raw) {
  const uint32_t misalign = smem_addr(raw) & 1023;
  return *reinterpret_cast<T*>(raw + ((1024 - misalign) & 1023));
}
template <class T>
constexpr int smem_bytes() {
  return static_cast<int>(sizeof(T)) + 1024;
}

// An mbarrier completes a phase when `count` arrivals have been made AND the transaction count it was told
// to expect (expect_tx, in bytes) has been paid off by async copies (complete_tx).
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// Make the initialised barriers visible to the other threads and to the async proxy (the TMA unit).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival that also raises the phase's expected transaction count by `bytes`. The producer calls it
// before issuing the copies; the copies' complete_tx pays the bytes off. The phase completes when both the
// arrival and the bytes are in, so nobody signals "after the TMA finished": the hardware does.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// A plain arrival (release semantics: this thread's earlier reads of the stage happen before it).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Spin until the phase with parity `parity` has completed. A fresh barrier is in phase 0, so waiting on
// parity 1 returns at once (the "previous" phase counts as done): producers start waiting on the empty
// barriers with parity 1, consumers on the full barriers with parity 0.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  const uint32_t addr = smem_addr(bar);
  uint32_t done;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
}

// ------------------------------------------------------------------------------------------------
// Device: TMA (cp.async.bulk.tensor)
// ------------------------------------------------------------------------------------------------

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Copy the box at (col, row) of the tensor into shared memory; the copy reports its bytes to `bar`.
__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, uint64_t* bar, int col,
                                            int row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_addr(smem_dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(col), "r"(row)
      : "memory");
}

// Copy a box from shared memory to the tensor at (col, row); the parts outside the tensor are not written.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* smem_src, int col, int row) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(smem_src)), "r"(col), "r"(row)
               : "memory");
}

__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Wait until the committed stores have finished reading shared memory (the buffer may be rewritten).
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Wait until the committed stores are complete (before the kernel exits).
__device__ __forceinline__ void tma_store_wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

// Order this thread's ordinary shared-memory writes before later async-proxy (TMA) reads of them.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ------------------------------------------------------------------------------------------------
// Device: wgmma
// ------------------------------------------------------------------------------------------------

// Shared-memory matrix descriptor for a K-major tile written by TMA with 128-byte swizzle: rows of
// 64 bf16 (128 bytes), 8-row groups 1024 bytes apart. The tile must start on a 1024-byte boundary;
// the k-th 16-wide slice of K starts 32 * k bytes further (the swizzle is applied by the hardware).
__device__ __forceinline__ uint64_t smem_desc_sw128(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  uint64_t desc = (addr & 0x3FFFF) >> 4;  // bits 0-13: start address / 16
  desc |= uint64_t(1) << 16;              // bits 16-29: leading byte offset / 16 (unused for this layout)
  desc |= uint64_t(1024 >> 4) << 32;      // bits 32-45: stride byte offset / 16 (8 rows x 128 B)
  desc |= uint64_t(1) << 62;              // bits 62-63: 1 = 128-byte swizzle
  return desc;
}

// wgmma.fence before the first wgmma that touches accumulator registers written by other instructions.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Keep the compiler from moving reads or writes of the accumulators across the async wgmma boundary.
template <int R>
__device__ __forceinline__ void fence_accumulators(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

template <int BN>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b);

// One BK = 64 slab: four m64nBNk16 instructions, each 16 elements (32 bytes, 2 descriptor units) further on.
template <>
__device__ __forceinline__ void wgmma_tile<128>(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
#pragma unroll
  for (int k = 0; k < BK / WGMMA_K; ++k) wgmma_m64n128k16(d, desc_a + 2 * k, desc_b + 2 * k, 1);
}
template <>
__device__ __forceinline__ void wgmma_tile<256>(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
#pragma unroll
  for (int k = 0; k < BK / WGMMA_K; ++k) wgmma_m64n256k16(d, desc_a + 2 * k, desc_b + 2 * k, 1);
}

// ------------------------------------------------------------------------------------------------
// Device: registers and named barriers
// ------------------------------------------------------------------------------------------------

// setmaxnreg: a warpgroup gives registers back (dec) or takes them from the SM's pool (inc). The counts
// are per thread, multiples of 8 in [24, 256]; the kernel must be compiled with a known register count
// (__launch_bounds__) or ptxas ignores the hint (warning C7508).
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(REGS));
}

// bar.sync on a hardware barrier other than 0 (which __syncthreads uses), for a subset of the threads.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ------------------------------------------------------------------------------------------------
// Device: epilogue
// ------------------------------------------------------------------------------------------------

// Register layout of a wgmma m64nN fp32 accumulator: thread t of the warpgroup (warp w = t / 32,
// lane l) holds, for every 8-column group j, d[4j + 0..1] at row 16w + l/4, columns 8j + 2(l%4) + 0..1,
// and d[4j + 2..3] at row 16w + l/4 + 8, same columns.
// Writes the 64 x BN block at (row0, col0) of C, dropping what lies outside M x N (N is a multiple of 8,
// so a column pair is either inside or outside).
template <int BN>
__device__ __forceinline__ void store_accumulators(const float (&d)[BN / 2], __nv_bfloat16* c, Problem p,
                                                   int row0, int col0, int thread_in_wg) {
  const int warp = thread_in_wg / 32, lane = thread_in_wg % 32;
  const int r = row0 + warp * 16 + lane / 4;
#pragma unroll
  for (int j = 0; j < BN / 8; ++j) {
    const int col = col0 + 8 * j + 2 * (lane % 4);
    if (col >= p.n) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = r + 8 * half;
      if (row < p.m) {
        *reinterpret_cast<__nv_bfloat162*>(c + static_cast<size_t>(row) * p.n + col) =
            __floats2bfloat162_rn(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
      }
    }
  }
}

}  // namespace hgemm
