"""The grouped GEMM of grouped_gemm.py with its operands read by TMA (Hopper's tensor memory accelerator) through
host-side tensor descriptors, and the tiles visited in groups of GROUP_M row blocks, column by column, so that the
programs running together share both their rows of X and their columns of W in L2 (GROUP_M = 1: row by row).
A tile of X may run past its expert's last token into the next expert's rows: those rows are computed and never
stored. Past the end of X or W, TMA fills zeros."""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from snippets.common.tiles import tile_coords  # (program, row blocks, column blocks, GROUP_M) -> (row, column)
from snippets.moe.grouped_gemm import INTERPRETED, check_args, plan


# --8<-- [start:kernel]
@triton.jit
def _grouped_tma_kernel(XD, WD, Y, TileExpert, TileRow, Offs, ROW_TILES, N, K, stride_ym,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                        DOT_FP32: tl.constexpr):
    tile, pid_n = tile_coords(tl.program_id(0), ROW_TILES, tl.cdiv(N, BLOCK_N), GROUP_M)
    e = tl.load(TileExpert + tile)
    row0 = tl.load(TileRow + tile)
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = XD.load([row0, k0])  # [BLOCK_M, BLOCK_K]; columns past K come back as zeros
        w = WD.load([e * K + k0, pid_n * BLOCK_N])  # W as [experts * K, N]: rows past this expert's K meet x's zeros
        if DOT_FP32:
            x, w = x.to(tl.float32), w.to(tl.float32)
        acc = tl.dot(x, w, acc)
    rm = row0 + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = (rm < tl.load(Offs + e + 1))[:, None] & (rn < N)[None, :]
    tl.store(Y + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :], acc.to(Y.dtype.element_ty), mask=ok)
# --8<-- [end:kernel]


def grouped_mm_tma(x: torch.Tensor, w: torch.Tensor, counts: list[int], block_m: int = 128, block_n: int = 128,
                   block_k: int = 64, num_warps: int = 8, num_stages: int = 4, group_m: int = 8,
                   tiles=None) -> torch.Tensor:
    """As grouped_gemm.grouped_mm (X [tokens, K] sorted by expert, W [experts, K, N]); needs TMA on a GPU
    (compute capability 9.0 or newer), or Triton's interpreter."""
    tokens, k, n = check_args(x, w, counts)
    experts = w.shape[0]
    tile_e, tile_r, offs = tiles if tiles is not None else plan(counts, block_m, x.device)
    y = torch.empty((tokens, n), dtype=x.dtype, device=x.device)
    if tile_e.numel() == 0:
        return y
    x, w = x.contiguous(), w.contiguous()
    xd = TensorDescriptor.from_tensor(x, [block_m, block_k])
    wd = TensorDescriptor.from_tensor(w.view(experts * k, n), [block_k, block_n])
    grid = (tile_e.numel() * triton.cdiv(n, block_n),)
    _grouped_tma_kernel[grid](xd, wd, y, tile_e, tile_r, offs, tile_e.numel(), n, k, y.stride(0), BLOCK_M=block_m,
                              BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m, DOT_FP32=INTERPRETED,
                              num_warps=num_warps, num_stages=num_stages)
    return y
