"""Bytes that dropout + residual add + LayerNorm must move through device memory, per variant, and the
effective bandwidth bytes / time, which compares with the copy ceiling (that counts read + write too).

m rows of n elements; `e` bytes per activation element, `we` per weight element (default e); the
per-row statistics (mean, rstd) are fp32. Each formula counts every tensor a kernel reads or writes
once, as if caches kept nothing between kernels.
"""
from __future__ import annotations

STAT = 4  # bytes per fp32 statistic


# --8<-- [start:bytes]
def fused_fwd_bytes(m: int, n: int, e: int, we: int | None = None, bias: bool = True, rms: bool = False) -> int:
    """Read x and residual, write y and h; weight (and bias) once; mean (LayerNorm) and rstd per row.
    Dropout adds nothing: the mask is regenerated, never stored."""
    we = e if we is None else we
    return 4 * m * n * e + n * we * (1 + bias) + m * STAT * (1 if rms else 2)


def fused_bwd_bytes(m: int, n: int, e: int, we: int | None = None, bias: bool = True, rms: bool = False,
                    dh_out: bool = True, programs: int = 1) -> int:
    """Read dy, h (and dh_out, the gradient reaching h directly), weight and the statistics; write dx and
    d(residual); each program writes one fp32 row of partial dweight (and dbias), which a reduction reads
    back before writing the final gradients."""
    we = e if we is None else we
    params = 1 + bias
    rows = (2 + dh_out) * m * n * e + 2 * m * n * e
    partials = 2 * programs * n * STAT * params + n * we * params
    return rows + n * we + m * STAT * (1 if rms else 2) + partials
# --8<-- [end:bytes]


def eager_fwd_kernels(m: int, n: int, e: int, we: int | None = None, bias: bool = True, rms: bool = False,
                      p: float = 0.0) -> list[tuple[str, int]]:
    """(kernel, bytes) for add_layernorm_eager: F.dropout (writes its output and a 1-byte mask), the add,
    then F.layer_norm or F.rms_norm (plus a bias add for RMSNorm with a bias)."""
    we = e if we is None else we
    kernels = []
    if p > 0:
        kernels.append(("dropout", 2 * m * n * e + m * n))
    kernels.append(("add", 3 * m * n * e))
    if rms:
        kernels.append(("rms_norm", 2 * m * n * e + n * we + m * STAT))
        if bias:
            kernels.append(("add_bias", 2 * m * n * e + n * we))
    else:
        kernels.append(("layer_norm", 2 * m * n * e + n * we * (1 + bias) + 2 * m * STAT))
    return kernels


def eager_fwd_bytes(m: int, n: int, e: int, we: int | None = None, bias: bool = True, rms: bool = False,
                    p: float = 0.0) -> int:
    return sum(b for _, b in eager_fwd_kernels(m, n, e, we, bias, rms, p))


def effective_gbps(nbytes: int, ms: float) -> float:
    """Bytes over time in GB/s (1e9 bytes per second)."""
    return nbytes / (ms * 1e-3) / 1e9
