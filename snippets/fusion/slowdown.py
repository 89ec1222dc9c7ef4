"""Four ways a fused kernel ends up slower than the kernels it replaced, each with a kernel small enough to read.

    register_pressure  add + LayerNorm over rows so wide that the fused kernel's per-thread state fills the
                       registers (fewer resident warps) or spills
    lost_concurrency   two independent reductions that each fill half the GPU, fused into one serial program
    tile_mismatch      RMSNorm fused into a GEMM epilogue: the tile must hold whole rows
    prologue_recompute GELU fused into a GEMM prologue: redone for every column block of the output

The timing is the notebook's; this module holds the kernels, their unfused counterparts and the evidence
readers (what the compiler allotted: registers, spills, shared memory, tensor-core instructions).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from snippets.common.checks import empty
from snippets.fusion import add_layernorm as al


def wide_add_layernorm(x, residual, weight, bias, num_warps: int, eps=1e-5):
    """add_layernorm's forward kernel with one row per program and the whole row in registers, past the
    hidden size it is meant for (MAX_N). Returns (y, h, the compiled kernel or None in the interpreter)."""
    m, n = x.shape
    y, h = empty((m, n), x.dtype, x.device), empty((m, n), residual.dtype, x.device)
    mean, rstd = (empty((m,), torch.float32, x.device) for _ in range(2))
    kernel = al._fwd_kernel[(m,)](
        x, residual, weight, bias, y, h, mean, rstd, x.stride(0), residual.stride(0), y.stride(0), h.stride(0),
        m, n, eps, 0.0, 1.0, 0, BLOCK_M=1, BLOCK_N=triton.next_power_of_2(n), HAS_BIAS=True, RMS=False,
        DROPOUT=False, num_warps=num_warps)
    return y, h, kernel


def unfused_add_layernorm(x, residual, weight, bias, eps=1e-5):
    """Eager: an add kernel, then PyTorch's LayerNorm kernel (which loops over a wide row instead of holding it)."""
    h = x + residual
    return F.layer_norm(h, (h.shape[-1],), weight, bias, eps), h


@triton.jit
def _sumsq_row(X, Out, row, L, BLOCK: tl.constexpr):
    base = X + row.to(tl.int64) * L
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, L, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        v = tl.load(base + offs, mask=offs < L, other=0.0).to(tl.float32)
        acc += v * v
    tl.store(Out + row, tl.sum(acc, axis=0))


# --8<-- [start:concurrency]
@triton.jit
def _sumsq_kernel(X, OutX, Y, OutY, R, L, BLOCK: tl.constexpr, MODE: tl.constexpr):
    """Sum of squares of each row of X [R, L] (and of Y). MODE 0: X only, one program per row.
    MODE 1 (serial fusion): program i does row i of X, then row i of Y. MODE 2 (grids joined):
    programs 0..R-1 do X, programs R..2R-1 do Y."""
    pid = tl.program_id(0)
    if MODE == 0:
        _sumsq_row(X, OutX, pid, L, BLOCK)
    elif MODE == 1:
        _sumsq_row(X, OutX, pid, L, BLOCK)
        _sumsq_row(Y, OutY, pid, L, BLOCK)
    else:
        if pid < R:
            _sumsq_row(X, OutX, pid, L, BLOCK)
        else:
            _sumsq_row(Y, OutY, pid - R, L, BLOCK)


def sumsq(x, block=4096, num_warps=4):
    """One reduction: R programs for R rows."""
    out = empty((x.shape[0],), torch.float32, x.device)
    _sumsq_kernel[(x.shape[0],)](x, out, x, out, x.shape[0], x.shape[1], BLOCK=block, MODE=0, num_warps=num_warps)
    return out


def sumsq_pair(x, y, serial: bool, block=4096, num_warps=4):
    """Both reductions in one launch: serial (R programs, each doing two rows) or joined grids (2R programs)."""
    r, n = x.shape
    if y.shape != x.shape:
        raise ValueError(f"x and y must have one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    ox, oy = (empty((r,), torch.float32, x.device) for _ in range(2))
    grid = (r if serial else 2 * r,)
    _sumsq_kernel[grid](x, ox, y, oy, r, n, BLOCK=block, MODE=1 if serial else 2, num_warps=num_warps)
    return ox, oy
# --8<-- [end:concurrency]


def on_two_streams(fa, fb, streams):
    """Run fa() and fb() on two side streams that wait for the current one, and make it wait for both."""
    cur = torch.cuda.current_stream()
    out = []
    for s, f in zip(streams, (fa, fb)):
        s.wait_stream(cur)
        with torch.cuda.stream(s):
            out.append(f())
    for s in streams:
        cur.wait_stream(s)
    return out


# --8<-- [start:evidence]
def resources(kernel) -> dict:
    """What the compiler gave a launched Triton kernel: registers per thread, spilled bytes, warps, shared
    memory, and whether its PTX uses Hopper's wgmma (tensor cores fed from shared memory, a warpgroup at a time)."""
    kernel._init_handles()
    ptx = kernel.asm["ptx"]
    return {"registers": kernel.n_regs, "spill_bytes": kernel.n_spills, "warps": kernel.metadata.num_warps,
            "smem_bytes": kernel.metadata.shared, "wgmma": "wgmma.mma_async" in ptx, "mma_sync": "mma.sync" in ptx}


def sm_limits(device=0) -> dict:
    """Per-SM limits of this GPU, as resident_warps takes them."""
    props = torch.cuda.get_device_properties(device)
    return {"regs_per_sm": props.regs_per_multiprocessor, "smem_per_sm": props.shared_memory_per_multiprocessor,
            "max_warps": props.max_threads_per_multi_processor // 32}


def resident_warps(registers: int, warps: int, smem_bytes: int, regs_per_sm: int = 65536,
                   smem_per_sm: int = 228 * 1024, max_warps: int = 64, max_blocks: int = 32) -> int:
    """Warps one SM can hold for this kernel (the occupancy calculator's rule): registers are allotted per
    warp in units of 256, shared memory per block (1 KiB reserved per block, as on sm_80 and later)."""
    per_warp = -(-registers * 32 // 256) * 256
    by_regs = regs_per_sm // (per_warp * warps) if registers else max_blocks
    by_smem = smem_per_sm // (smem_bytes + 1024) if smem_bytes else max_blocks
    return min(by_regs, by_smem, max_warps // warps, max_blocks) * warps
# --8<-- [end:evidence]
