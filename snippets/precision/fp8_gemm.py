"""FP8 GEMM throughput against bf16 on a GPU with FP8 tensor cores (compute capability 8.9 or 9.0), at
training shapes from public models: torch._scaled_mm with one scale per tensor, bf16 output."""
from __future__ import annotations

import torch

from snippets.common.timing import bench_ms
from snippets.precision.fp8 import E4M3, E4M3_MAX

# (model, GEMM, M tokens, K, N): Llama-3.1-8B (hidden 4096, MLP 14336) and Llama-3.1-70B (8192, 28672)
SHAPES = [("Llama-3.1-8B", "attention out", 8192, 4096, 4096), ("Llama-3.1-8B", "MLP up", 8192, 4096, 14336),
          ("Llama-3.1-8B", "MLP down", 8192, 14336, 4096), ("Llama-3.1-70B", "MLP up", 8192, 8192, 28672),
          ("Llama-3.1-70B", "MLP down", 8192, 28672, 8192)]


def fp8_supported() -> str | None:
    """None when this machine runs FP8 GEMMs, else why not."""
    if not torch.cuda.is_available():
        return "no CUDA GPU"
    if torch.cuda.get_device_capability() < (8, 9):
        return f"compute capability {torch.cuda.get_device_capability()} has no FP8 tensor cores"
    return None


def _to_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (x.abs().amax().float() / E4M3_MAX).clamp(min=1e-12)
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


# --8<-- [start:gemm]
def measure(m: int, k: int, n: int) -> dict:
    """bf16 and FP8 (per-tensor scales) GEMM times, and the FP8 result's error against bf16's."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()  # column-major, as _scaled_mm wants
    qa, sa = _to_fp8(a)
    qb, sb = _to_fp8(b)
    fp8 = lambda: torch._scaled_mm(qa, qb, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)  # noqa: E731
    ref = a @ b
    err = float((fp8().float() - ref.float()).norm() / ref.float().norm())
    bf16_ms, fp8_ms = bench_ms(lambda: a @ b, "cuda"), bench_ms(fp8, "cuda")
    return {"bf16_ms": bf16_ms, "fp8_ms": fp8_ms, "speedup": bf16_ms / fp8_ms, "rel_error": err,
            "fp8_tflops": 2 * m * k * n / fp8_ms / 1e9}
# --8<-- [end:gemm]
