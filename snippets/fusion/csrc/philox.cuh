// Philox4x32-10 keyed by the seed, as Triton's tl.philox computes it, and the dropout uniform drawn
// from it (see add_layernorm.py). Host and device: the tests run it on the CPU against Triton.
#pragma once
#include <stdint.h>

#ifdef __CUDACC__
#define FUSION_HD __host__ __device__ __forceinline__
#else
#define FUSION_HD inline
#endif

namespace fusion {

struct Philox4 {
  uint32_t v[4];
};

FUSION_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

// counter = (c0, c1, 0, 0), key = (low, high) words of the seed
FUSION_HD Philox4 philox4x32_10(uint64_t seed, uint32_t c0, uint32_t c1) {
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  uint32_t c2 = 0, c3 = 0;
  for (int i = 0; i < 10; ++i) {
    const uint32_t hi_b = mulhi32(0xCD9E8D57u, c2), lo_b = 0xCD9E8D57u * c2;
    const uint32_t hi_a = mulhi32(0xD2511F53u, c0), lo_a = 0xD2511F53u * c0;
    c0 = hi_b ^ c1 ^ k0;
    c1 = lo_b;
    c2 = hi_a ^ c3 ^ k1;
    c3 = lo_a;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// 16 random bits per element: one Philox call (four 32-bit words) serves 8 columns, word k / 2, low half
// first. u = bits * 2^-16 is exact in float, so every implementation draws the same mask.
FUSION_HD float philox_uniform(const Philox4& r, int k) {  // k in 0..7; constant k folds to one word
  const uint32_t w = k < 4 ? (k < 2 ? r.v[0] : r.v[1]) : (k < 6 ? r.v[2] : r.v[3]);
  return static_cast<float>((k & 1) ? w >> 16 : w & 0xFFFFu) * 1.52587890625e-05f;
}

// u for element (row, col)
FUSION_HD float dropout_uniform(uint64_t seed, uint32_t row, uint32_t col) {
  return philox_uniform(philox4x32_10(seed, col / 8, row), static_cast<int>(col % 8));
}

}  // namespace fusion
