"""torch.matmul throughput per dtype: the arithmetic ceiling.

Each measurement first checks the product against a float64 product of the same (rounded) inputs,
on fresh random inputs, into an output poisoned with NaN.
"""
from __future__ import annotations

import contextlib

import torch

from snippets.common.checks import poisoned_empty, rel_error
from snippets.common.timing import bench_ms

TORCH_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
TOLERANCE = {"bf16": 1e-2, "fp16": 1e-2, "tf32": 5e-3, "fp32": 1e-5}
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}
_PRECISION = {"tf32": "high", "fp32": "highest"}  # torch.set_float32_matmul_precision values


def matmul_dtypes(device: str) -> list[str]:
    """bf16, tf32 and fp32; fp16 instead of bf16 and no tf32 below compute capability 8.0 (T4)."""
    if device.startswith("cuda") and torch.cuda.get_device_capability(device) < (8, 0):
        return ["fp16", "fp32"]
    return ["bf16", "tf32", "fp32"]


@contextlib.contextmanager
def float32_precision(dtype: str):
    """Allow (tf32) or forbid (fp32) TF32 in float32 matmuls; restore the setting afterwards."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(_PRECISION.get(dtype, old))
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref||_F / ||ref||_F in float64; NaN anywhere in `out` gives NaN."""
    return rel_error(out, ref)


def check_matmul(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dtype: str) -> float:
    err = relative_error(out, a.double() @ b.double())
    assert err < TOLERANCE[dtype], f"{dtype} {tuple(a.shape)}@{tuple(b.shape)}: relative error {err:.2e}"
    return err


def matmul_tflops(m: int, n: int, k: int, dtype: str, device: str) -> float:
    """TFLOP/s (2mnk flops) of torch.matmul on (m, k) @ (k, n), checked first."""
    with float32_precision(dtype):
        a = torch.randn(m, k, device=device).to(TORCH_DTYPE[dtype])
        b = torch.randn(k, n, device=device).to(TORCH_DTYPE[dtype])
        c = poisoned_empty((m, n), TORCH_DTYPE[dtype], device)
        torch.matmul(a, b, out=c)
        check_matmul(c, a, b, dtype)
        ms = bench_ms(lambda: torch.matmul(a, b, out=c), device)
    return 2 * m * n * k / (ms * 1e-3) / 1e12


def matmul_sweep(shapes: list[tuple[int, int, int]], dtypes: list[str], device: str) -> list[list]:
    """Rows of [m, n, k, dtype, TFLOP/s] for every shape and dtype."""
    return [[m, n, k, dt, matmul_tflops(m, n, k, dt, device)] for (m, n, k) in shapes for dt in dtypes]
