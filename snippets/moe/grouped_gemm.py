"""The expert FFN's matmul for all experts in one launch: tokens sorted by expert (X [tokens, K], expert e owning
rows offs[e]:offs[e+1]) times each expert's weight (W [experts, K, N]). A host-side schedule lists one entry per
(expert, block of BLOCK_M rows), so experts with no tokens cost nothing and no program idles on padding."""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# Triton 3.6's interpreter gets tl.dot wrong for bf16 operands (see fusion/gemm.py)
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def _grouped_kernel(X, W, Y, TileExpert, TileRow, Offs, N, K, stride_xm, stride_we, stride_wk, stride_ym,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_FP32: tl.constexpr):
    tile, pid_n = tl.program_id(0), tl.program_id(1)
    e = tl.load(TileExpert + tile)
    rm = tl.load(TileRow + tile) + tl.arange(0, BLOCK_M)
    m_ok = rm < tl.load(Offs + e + 1)  # the last block of an expert stops at its last token
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = rn < N
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(X + rm.to(tl.int64)[:, None] * stride_xm + rk[None, :], mask=m_ok[:, None] & (rk[None, :] < K),
                    other=0.0)
        w = tl.load(W + e.to(tl.int64) * stride_we + rk[:, None] * stride_wk + rn[None, :],
                    mask=(rk[:, None] < K) & n_ok[None, :], other=0.0)
        if DOT_FP32:
            x, w = x.to(tl.float32), w.to(tl.float32)
        acc = tl.dot(x, w, acc)
    tl.store(Y + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :], acc.to(Y.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


def schedule(counts: list[int], block_m: int) -> tuple[list[int], list[int], list[int]]:
    """(expert of each tile, first row of each tile, offsets [experts + 1]) for tokens sorted by expert."""
    offs, experts, rows = [0], [], []
    for e, c in enumerate(counts):
        for start in range(offs[-1], offs[-1] + c, block_m):
            experts.append(e)
            rows.append(start)
        offs.append(offs[-1] + c)
    return experts, rows, offs


def plan(counts: list[int], block_m: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The schedule as int32 tensors on the device: built once per routing, outside any timed region."""
    return tuple(torch.tensor(v, dtype=torch.int32, device=device) for v in schedule(counts, block_m))


def check_args(x: torch.Tensor, w: torch.Tensor, counts: list[int]) -> tuple[int, int, int]:
    """(tokens, K, N), or a ValueError naming the shapes that disagree."""
    tokens, k = x.shape
    experts, k2, n = w.shape
    if k != k2 or len(counts) != experts or sum(counts) != tokens:
        raise ValueError(f"x {tuple(x.shape)}, w {tuple(w.shape)} and counts (sum {sum(counts)}, {len(counts)} "
                         f"experts) do not agree")
    return tokens, k, n


def grouped_mm(x: torch.Tensor, w: torch.Tensor, counts: list[int], block_m: int = 64, block_n: int = 128,
               block_k: int = 64, num_warps: int = 4, num_stages: int = 3, tiles=None) -> torch.Tensor:
    """Y [tokens, N] with Y[rows of expert e] = X[rows of expert e] @ W[e]; counts[e] tokens per expert, in order.
    tiles: plan(counts, block_m, device), when the caller has it already."""
    tokens, k, n = check_args(x, w, counts)
    tile_e, tile_r, offs = tiles if tiles is not None else plan(counts, block_m, x.device)
    y = torch.empty((tokens, n), dtype=x.dtype, device=x.device)
    if tile_e.numel() == 0:
        return y
    x, w = x.contiguous(), w.contiguous()
    grid = (tile_e.numel(), triton.cdiv(n, block_n))
    _grouped_kernel[grid](x, w, y, tile_e, tile_r, offs, n, k, x.stride(0), w.stride(0), w.stride(1), y.stride(0),
                          BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, DOT_FP32=INTERPRETED,
                          num_warps=num_warps, num_stages=num_stages)
    return y


def loop_mm(x: torch.Tensor, w: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """One matmul per expert: what a plain PyTorch MoE layer does."""
    out, start = [], 0
    for e, c in enumerate(counts):
        out.append(x[start:start + c] @ w[e])
        start += c
    return torch.cat(out)


def torch_grouped_mm(x: torch.Tensor, w: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """torch._grouped_mm (CUTLASS; CUDA, bf16); ends: int32 cumulative row ends of each expert (row_ends)."""
    return torch._grouped_mm(x, w, offs=ends)


def row_ends(counts: list[int], device) -> torch.Tensor:
    return torch.tensor(counts, device=device).cumsum(0).to(torch.int32)


def routed_counts(tokens: int, experts: int, skew: float, gen: torch.Generator) -> list[int]:
    """Tokens per expert: skew 0 is balanced; larger skews follow a Zipf-like law (a few hot experts)."""
    weights = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** skew
    chosen = torch.multinomial(weights / weights.sum(), tokens, replacement=True, generator=gen)
    return torch.bincount(chosen, minlength=experts).tolist()
