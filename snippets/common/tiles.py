"""What the Triton GEMMs of several labs share: a tile configuration and the grouped order of output tiles.

fusion/gemm.py, gemm/triton_ws.py and moe/grouped_tma.py all cut C into BLOCK_M x BLOCK_N tiles and visit
them in groups of GROUP_M row blocks, so that programs running together reuse the same columns of B in L2.
"""
from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl


@dataclass(frozen=True)
class Config:
    """One launch of a tiled GEMM: tile M x N x K, warps per program, pipeline stages, rows per group."""
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 8

    def __str__(self):
        return f"{self.block_m}x{self.block_n}x{self.block_k} w{self.num_warps} s{self.num_stages}"


@triton.jit
def tile_coords(t, tiles_m, tiles_n, GROUP_M: tl.constexpr):  # gemm/schedule.grouped_tile, in Triton
    """(row block, column block) of tile t: GROUP_M row blocks at a time, column by column within a group."""
    per_group = GROUP_M * tiles_n
    first_m = (t // per_group) * GROUP_M
    rows = min(tiles_m - first_m, GROUP_M)
    return first_m + (t % per_group) % rows, (t % per_group) // rows
