"""Triton GEMMs for the same problem, C = A @ B.T (A [M, K], B [N, K], C [M, N]):

    ws_matmul       persistent kernel, TMA tensor descriptors made on the device (tl.make_tensor_descriptor),
                    outer tile loop tl.range(..., warp_specialize=True): the compiler splits producer and
                    consumer warps itself (Hopper: Triton >= 3.5; num_warps=8 on Triton 3.6 / H200)
    the same kernel with warp_specialize=False: Triton's own software pipelining, no specialisation
    portable_matmul plain pointers, tl.load/tl.dot with masks: any GPU Triton supports (a Colab T4 in fp16)
                    and the CPU interpreter (TRITON_INTERPRET=1)
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from snippets.common.checks import empty  # every output is allocated here: checks can poison them all
from snippets.common.tiles import Config, tile_coords  # tile M x N x K, warps, stages, group; grouped tile order

# Triton 3.6's interpreter gets tl.dot wrong for bf16 operands; there the kernels multiply fp32 copies, which is
# what tensor cores do with bf16 (exact products, fp32 sums). Compiled kernels never take this branch.
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


# Hopper candidates for the descriptor kernel (each is checked before it is timed; the fastest is kept).
# Warp specialisation needs num_warps=8 here: at 4 the Triton 3.6 compiler crashed on the H200.
WS_CONFIGS = [Config(128, 256, 64, 8, 3), Config(128, 128, 64, 8, 4), Config(128, 256, 64, 8, 4),
              Config(256, 128, 64, 8, 3)]
PORTABLE_CONFIGS = [Config(128, 128, 32, 4, 3), Config(64, 64, 32, 4, 2)]  # the last fits a T4's 64 KiB
SMOKE = Config(32, 32, 32, 4, 1)


@triton.jit
def _ws_kernel(A, B, C, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr, NUM_PROGRAMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
               DOT_FP32: tl.constexpr):
    # TMA descriptors built on the device (needs triton.set_allocator); loads past the edges read zeros,
    # stores past the edges are dropped, so M, N, K need not be multiples of the tile.
    a_desc = tl.make_tensor_descriptor(A, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(B, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(C, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    tiles_m, tiles_n, k_tiles = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), tl.cdiv(K, BLOCK_K)
    # persistent: program p takes tiles p, p + NUM_PROGRAMS, ...; flatten=False (Hopper WS does not support it)
    for t in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_PROGRAMS, flatten=False,
                      warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = tile_coords(t, tiles_m, tiles_n, GROUP_M)
        acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        for kt in range(k_tiles):
            a = a_desc.load([pid_m * BLOCK_M, kt * BLOCK_K])
            b = b_desc.load([pid_n * BLOCK_N, kt * BLOCK_K])
            if DOT_FP32:
                a, b = a.to(tl.float32), b.to(tl.float32)
            acc = tl.dot(a, b.T, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(C.dtype.element_ty))


def _scratch(size: int, alignment: int, stream):  # global memory the device-side descriptors live in
    return torch.empty(size, dtype=torch.int8, device="cpu" if INTERPRETED else "cuda")


def _check(a, b):
    (m, k), (n, k2) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    return m, n, k


def programs(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if torch.device(device).type == "cuda" else 4


def ws_matmul(a, b, warp_specialize: bool = True, config: Config = WS_CONFIGS[0]):
    """C = A @ B.T through the persistent descriptor kernel, with or without warp specialisation.
    TMA needs 16-byte aligned rows: K and N multiples of 8 for bf16."""
    m, n, k = _check(a, b)
    if k % 8 or n % 8:
        raise ValueError(f"K = {k}, N = {n}: TMA descriptors need 16-byte rows (multiples of 8 for bf16)")
    if INTERPRETED:
        config = SMOKE
    triton.set_allocator(_scratch)
    c = empty((m, n), a.dtype, a.device)
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    grid = min(programs(a.device), tiles)
    _ws_kernel[(grid,)](a, b, c, m, n, k, config.block_m, config.block_n, config.block_k, config.group_m, grid,
                        warp_specialize and not INTERPRETED, INTERPRETED,
                        num_warps=config.num_warps, num_stages=config.num_stages)
    return c


@triton.jit
def _portable_kernel(A, B, C, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr, DOT_FP32: tl.constexpr):
    pid_m, pid_n = tile_coords(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = A + rm.to(tl.int64)[:, None] * K + rk[None, :]  # A [M, K] row-major
    b_ptrs = B + rn.to(tl.int64)[None, :] * K + rk[:, None]  # B [N, K] read as B^T [K, N]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k) & (rn[None, :] < N), other=0.0)
        if DOT_FP32:
            a, b = a.to(tl.float32), b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    c_ptrs = C + rm.to(tl.int64)[:, None] * N + rn[None, :]
    tl.store(c_ptrs, acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def portable_matmul(a, b, config: Config = PORTABLE_CONFIGS[0]):
    """C = A @ B.T with plain loads: any shape, any GPU Triton runs on, and the interpreter."""
    m, n, k = _check(a, b)
    if INTERPRETED:
        config = SMOKE
    c = empty((m, n), a.dtype, a.device)
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    _portable_kernel[grid](a.contiguous(), b.contiguous(), c, m, n, k, config.block_m, config.block_n,
                           config.block_k, config.group_m, INTERPRETED,
                           num_warps=config.num_warps, num_stages=config.num_stages)
    return c
