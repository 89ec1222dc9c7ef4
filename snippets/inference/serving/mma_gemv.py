"""W4A16 and W8A16 decode GEMV on tensor cores in CUDA (csrc/w4_mma_gemv.cu), Marlin's layout idea: pack_mma orders
the fields once so that what a lane dequantises from one word (W8: two) is already its A fragment of mma.m16n8k16 (16
output features by 16 k), x (fp16, or for W4 bf16) being the B operand with the batch along n. Built with load_inline
for the GPU at hand (compute capability 8.0 or newer); the packing and its fragment mapping are checked on the CPU
(fragments())."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

SRC = Path(__file__).resolve().with_name("csrc") / "w4_mma_gemv.cu"
# field f of slice s of a lane (g = lane // 4, q = lane % 4) holds output feature 16 tile + g + ROW[bits][f] and
# k = 128 group + 32 q + 4 s + KOFF[bits][f], and the kernel hands mma the x of those k (x_k below). W4: nibble f of
# word s, register j of the A fragment from nibbles j and j + 4; W8: byte f % 4 of word 2s + f // 4, register j
# from bytes 2j and 2j + 1 of the slice's eight
ROW = {4: (0, 8, 0, 8, 0, 8, 0, 8), 8: (0, 0, 8, 8, 0, 0, 8, 8)}
KOFF = {4: (0, 0, 2, 2, 1, 1, 3, 3), 8: (0, 1, 0, 1, 2, 3, 2, 3)}


class MmaWeights(NamedTuple):
    wq: torch.Tensor  # int32 [K / 128, N / 16, bits / 2, 32 lanes, 4]: a lane's word i at [..., i // 4, lane, i % 4]
    st: torch.Tensor  # fp32 [K / 128, N]
    y32: torch.Tensor  # split-K workspace, kept zero: fp32 [8, N] and int32 counters
    cnt: torch.Tensor
    bits: int = 4


def pack_mma(q: torch.Tensor, scales: torch.Tensor, group: int = 128, bits: int = 4) -> MmaWeights:
    """quantize(w, bits, 128)'s output (W4: uint8 [N, K / 2], value + 8 in nibbles; W8: int8 [N, K], stored as
    value + 128) in the kernel's order."""
    if group != 128:
        raise ValueError(f"the kernel takes groups of 128, not {group}")
    n, k, dev = q.shape[0], q.shape[1] * (8 // bits), q.device
    if n % 16 or k % 128:
        raise ValueError(f"N ({n}) must be a multiple of 16 and K ({k}) of 128")
    if bits == 4:
        u = torch.stack([q & 0xF, q >> 4], -1).view(n, k).long()
    else:
        u = q.long() + 128
    lane = torch.arange(32, device=dev)
    feature = (torch.arange(n // 16, device=dev)[:, None, None] * 16 + (lane // 4)[:, None]
               + torch.tensor(ROW[bits], device=dev))[None, :, :, None, :]  # [1, T, 32, 1, 8]
    kk = (torch.arange(k // 128, device=dev)[:, None, None, None, None] * 128
          + torch.arange(8, device=dev)[:, None] * 4 + torch.tensor(KOFF[bits], device=dev)
          + 32 * (lane % 4)[:, None, None])  # [KB, 1, 32, 8 slices, 8 fields]
    per = 32 // bits  # fields per word
    fields = u[feature, kk].view(k // 128, n // 16, 32, 8 * 8 // per, per)
    words = (fields << (bits * torch.arange(per, device=dev))).sum(-1)  # [KB, T, 32, words], 0 .. 2**32 - 1
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    words = words.view(k // 128, n // 16, 32, bits // 2, 4).transpose(2, 3).contiguous()
    return MmaWeights(words, scales.T.contiguous(), torch.zeros((8, n), device=dev),
                      torch.zeros(n // 16, dtype=torch.int32, device=dev), bits)


def x_k(s: int, q: int, kk: int) -> int:
    """The k within a group of the x that the kernel hands mma as B for slice s at the instruction's k index kk
    (lane q's B registers hold kk = 2q, 2q + 1 and 2q + 8, 2q + 9): lane q reads x[32 q .. 32 q + 31] of the group
    as four uint4 and gives slice s words 2s and 2s + 1 of them."""
    assert kk // 2 % 4 == q
    return 32 * q + 4 * s + 2 * (kk // 8) + kk % 2


def fragments(p: MmaWeights) -> np.ndarray:
    """The dequantised weights [K, N] as the kernel hands them to mma, rebuilt from the words by the PTX ISA's A
    fragment layout of m16n8k16 (register r: row g + 8 (r % 2), k index 2q + 8 (r // 2) and + 1; g = lane // 4,
    q = lane % 4), the dequantisation (register r from nibbles r and r + 4 of word s; W8: from bytes 2 (r % 2) and
    2 (r % 2) + 1 of word 2s + r // 2) and x_k, not from ROW and KOFF."""
    w = p.wq.cpu().numpy().view(np.uint32)
    w = w.transpose(0, 1, 3, 2, 4).reshape(*w.shape[:2], 32, -1)  # [KB, T, lane, word]
    kb, t = w.shape[:2]
    out = np.zeros((kb * 128, t * 16), np.float32)

    def half(s, r, h):  # [KB, T, lane]
        if p.bits == 4:
            return ((w[..., s] >> np.uint32(4 * (r + 4 * h))) & np.uint32(0xF)).astype(np.float32) - 8
        return ((w[..., 2 * s + r // 2] >> np.uint32(8 * (2 * (r % 2) + h))) & np.uint32(0xFF)).astype(np.float32) - 128

    for lane in range(32):
        g, q = divmod(lane, 4)
        for s in range(8):
            for r in range(4):
                for h in range(2):
                    rows = np.arange(kb) * 128 + x_k(s, q, 2 * q + 8 * (r // 2) + h)
                    out[rows[:, None], np.arange(t) * 16 + g + 8 * (r % 2)] = half(s, r, h)[:, :, lane]
    return out


_BUILT: dict[str, object] = {}
WRAPPER = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

extern "C" cudaError_t w4_mma_gemv(const void* x, const void* wq, const float* st, void* y, float* y32, int* cnt,
                                   int m, int n, int k, int bits, int bf16, int tw, int kw, int stages, int splits,
                                   cudaStream_t stream);

at::Tensor gemv(const at::Tensor& x, const at::Tensor& wq, const at::Tensor& st, at::Tensor y32, at::Tensor cnt,
                int64_t bits, int64_t tw, int64_t kw, int64_t stages, int64_t splits) {
  TORCH_CHECK((x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16) && x.is_contiguous(),
              "contiguous fp16 or bf16 x expected");
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = at::empty({x.size(0), st.size(1)}, x.options());
  const cudaError_t err = w4_mma_gemv(x.data_ptr(), wq.data_ptr(), st.data_ptr<float>(), y.data_ptr(),
                                      y32.data_ptr<float>(), cnt.data_ptr<int>(), x.size(0), st.size(1), x.size(1),
                                      bits, x.scalar_type() == at::kBFloat16, tw, kw, stages, splits,
                                      c10::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "w4_mma_gemv: ", cudaGetErrorString(err));
  return y;
}
"""


def build():
    """Compile for this GPU (mma.m16n8k16 in fp16 needs compute capability 8.0: A100, L4, H100/H200, not T4)."""
    if "ext" not in _BUILT:
        from torch.utils.cpp_extension import load_inline

        major, minor = torch.cuda.get_device_capability()
        if major < 8:
            raise RuntimeError(f"the tensor-core GEMV needs compute capability 8.0 or newer, not {major}.{minor}")
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
        cc, digest = f"{major}{minor}", hashlib.sha256(SRC.read_bytes()).hexdigest()[:10]
        _BUILT["ext"] = load_inline(name=f"w4mma_{digest}_{cc}", cpp_sources=WRAPPER, cuda_sources=SRC.read_text(),
                                    functions=["gemv"],
                                    extra_cuda_cflags=["-O3", f"-gencode=arch=compute_{cc},code=sm_{cc}"])
    return _BUILT["ext"]


def mma_gemv(x: torch.Tensor, p: MmaWeights, tw: int = 2, kw: int = 8, stages: int = 2,
             splits: int = 1) -> torch.Tensor:
    """A block takes tw tiles of 16 features, its kw warps divide K among them (summed in shared memory), the loads
    of `stages` groups of 128 in flight per warp; splits > 1 divides K among blocks too (summed by atomics). See
    csrc/w4_mma_gemv.cu for the instantiated combinations."""
    return build().gemv(x.contiguous(), p.wq, p.st, p.y32, p.cnt, p.bits, tw, kw, stages, splits)
