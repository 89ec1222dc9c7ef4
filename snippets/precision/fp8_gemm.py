"""FP8 GEMM throughput against bf16 on a GPU with FP8 tensor cores (compute capability 8.9 or 9.0), at
training shapes from public models: torch._scaled_mm with one scale per tensor, and with DeepSeek-V3's
fine-grained scales (1x128 tiles of the activations, 128x128 blocks of the weights), bf16 output."""
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


# --8<-- [start:blockwise]
def _blockwise_operands(a: torch.Tensor, b_nk: torch.Tensor):
    """DeepSeek-V3's fine-grained scales: a [M, K] per 1x128 tile, b [N, K] per 128x128 block; the FP8 values and
    scales as float32 [M, K/128] and [N/128, K/128]."""
    m, k = a.shape
    n = b_nk.shape[0]
    at = a.float().view(m, k // 128, 128)
    sa = (at.abs().amax(-1) / E4M3_MAX).clamp(min=1e-12)
    qa = (at / sa[..., None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).view(m, k)
    bt = b_nk.float().view(n // 128, 128, k // 128, 128)
    sb = (bt.abs().amax((1, 3)) / E4M3_MAX).clamp(min=1e-12)
    qb = (bt / sb[:, None, :, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).view(n, k)
    return qa, sa, qb, sb
# --8<-- [end:blockwise]


def _layouts(sa: torch.Tensor, sb: torch.Tensor):
    """The scale layouts a PyTorch release may ask for: (name, scale_a, scale_b)."""
    col = lambda s: s.t().contiguous().t()  # noqa: E731  same shape, outer dimension major
    return [("a (M, K/128) column-major, b (N/128, K/128)", col(sa), sb),
            ("a (M, K/128) column-major, b (K/128, N/128)", col(sa), sb.t()),
            ("a (M, K/128) column-major, b (K/128, N/128) row-major", col(sa), sb.t().contiguous()),
            ("a (M, K/128), b (N/128, K/128)", sa, sb),
            ("a (M, K/128), b (K/128, N/128)", sa, sb.t().contiguous())]


def blockwise_layout(seed: int = 0) -> tuple[int | None, str]:
    """(index into _layouts, its name) of the scale layout this PyTorch's torch._scaled_mm takes for DeepSeek-V3's
    scales, or (None, why none works). Each layout is checked on operands whose blocks differ in size by up to
    1000x, so a layout that misreads the scales fails the check instead of passing by accident."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    m, k, n = 256, 512, 384
    a = torch.randn(m, k, device="cuda", generator=g) * 10 ** (3 * torch.rand(m, k // 128, 1, device="cuda",
                                                                             generator=g)).repeat(1, 1, 128).view(m, k)
    b = torch.randn(n, k, device="cuda", generator=g) * 10 ** (3 * torch.rand(n // 128, 1, k // 128, 1,
                                                                             device="cuda", generator=g)).expand(
        n // 128, 128, k // 128, 128).reshape(n, k)
    qa, sa, qb, sb = _blockwise_operands(a, b)
    want = (qa.float() * sa.repeat_interleave(128, 1)) @ (qb.float() * sb.repeat_interleave(128, 0)
                                                          .repeat_interleave(128, 1)).t()
    why = []
    for i, (name, scale_a, scale_b) in enumerate(_layouts(sa, sb)):
        try:
            got = torch._scaled_mm(qa, qb.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
        except (RuntimeError, ValueError) as e:
            why.append(f"{name}: {str(e).splitlines()[0][:120]}")
            continue
        err = float((got.float() - want).norm() / want.norm())
        if err < 1e-2:
            return i, name
        why.append(f"{name}: ran, but {err:.2g} off the dequantised product")
    return None, "; ".join(why)


def measure_blockwise(m: int, k: int, n: int, layout: int) -> dict:
    """bf16 and fine-grained FP8 GEMM times at one shape, and the FP8 result's error against bf16's; `layout`
    from blockwise_layout(). Quantising is outside the timed call, as for the per-tensor GEMM."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b_nk = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = b_nk.t()
    qa, sa, qb, sb = _blockwise_operands(a, b_nk)
    _, scale_a, scale_b = _layouts(sa, sb)[layout]
    qb_t = qb.t()
    fp8 = lambda: torch._scaled_mm(qa, qb_t, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)  # noqa: E731
    ref = a @ b
    err = float((fp8().float() - ref.float()).norm() / ref.float().norm())
    bf16_ms, fp8_ms = bench_ms(lambda: a @ b, "cuda"), bench_ms(fp8, "cuda")
    return {"bf16_ms": bf16_ms, "fp8_ms": fp8_ms, "speedup": bf16_ms / fp8_ms, "rel_error": err,
            "fp8_tflops": 2 * m * k * n / fp8_ms / 1e9}
