"""FP8 scaling recipes and fp16 loss scaling, as numerics: the same arithmetic on any device.

An FP8 GEMM multiplies E4M3 operands (largest finite value 448, 3 mantissa bits) and accumulates in higher
precision; what decides its error is the scale each operand is divided by before the cast. One scale per
tensor lets a single outlier set it for every element, so small values lose their bits. DeepSeek-V3's
fine-grained recipe gives each 1x128 tile of the activations and each 128x128 block of the weights its own
scale, so an outlier costs only its own tile (DeepSeek-V3 technical report, section 3.3).
"""
from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max  # 448
TILE = 128


def quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Round x / scale to E4M3 and back: what the GEMM actually multiplies, in the input's dtype."""
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3).to(x.dtype) * scale


def _scale(amax: torch.Tensor) -> torch.Tensor:
    return amax.clamp(min=1e-12) / E4M3_MAX


# --8<-- [start:recipes]
def per_tensor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One scale for all of a [M, K], one for all of b [K, N]."""
    return quantize(a, _scale(a.abs().amax())) @ quantize(b, _scale(b.abs().amax()))


def blockwise(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A scale per 1x128 tile of a (along K) and per 128x128 block of b; K and N multiples of 128."""
    m, k = a.shape
    n = b.shape[1]
    at = a.view(m, k // TILE, TILE)
    qa = quantize(at, _scale(at.abs().amax(-1, keepdim=True))).view(m, k)
    bt = b.view(k // TILE, TILE, n // TILE, TILE)
    qb = quantize(bt, _scale(bt.abs().amax((1, 3), keepdim=True))).view(k, n)
    return qa @ qb  # the products summed in the input's precision: DeepSeek-V3 promotes to fp32 every 128
# --8<-- [end:recipes]


def activations_and_outliers(m: int, k: int, gen: torch.Generator, channels: int = 4, size: float = 100.0):
    """(N(0, 1) activations with a few outlier channels, as LLM activations have (LLM.int8(), SmoothQuant),
    the outlier channels' indices)."""
    x = torch.randn(m, k, generator=gen, dtype=torch.float64)
    cols = torch.randperm(k, generator=gen)[:channels]
    x[:, cols] *= size
    return x, cols


def activations_with_outliers(m: int, k: int, gen: torch.Generator, channels: int = 4, size: float = 100.0):
    return activations_and_outliers(m, k, gen, channels, size)[0]


def ordinary_error(a: torch.Tensor, outliers: torch.Tensor) -> dict[str, float]:
    """Relative error of the quantised activations on the ordinary channels alone, per recipe: where one scale
    per tensor pushes ordinary values into FP8's subnormals or to zero, and 1x128 tiles do not."""
    m, k = a.shape
    keep = torch.ones(k, dtype=torch.bool)
    keep[outliers] = False
    at = a.view(m, k // TILE, TILE)
    tiles = quantize(at, _scale(at.abs().amax(-1, keepdim=True))).view(m, k)
    tensor = quantize(a, _scale(a.abs().amax()))
    return {"per_tensor": rel_error(tensor[:, keep], a[:, keep]), "blockwise": rel_error(tiles[:, keep], a[:, keep])}


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Frobenius-norm relative error."""
    return float((got - want).norm() / want.norm())


# --8<-- [start:loss_scale]
def underflow_fraction(grads: torch.Tensor, scale: float, dtype: torch.dtype = torch.float16) -> float:
    """Share of nonzero fp32 gradients that become zero in `dtype` after multiplying by `scale`."""
    nonzero = grads != 0
    return float(((grads * scale).to(dtype) == 0)[nonzero].float().mean())
# --8<-- [end:loss_scale]
