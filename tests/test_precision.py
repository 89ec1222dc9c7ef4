"""snippets/precision on the CPU: FP8 (E4M3) numerics emulated by rounding, the same arithmetic a GPU does
before its higher-precision accumulation. Fine-grained scaling (1x128 activation tiles, 128x128 weight
blocks) beats one scale per tensor when activations have outlier channels, and matches it without them;
loss scaling brings small gradients back above fp16's underflow, and bf16 needs none."""

import pytest
import torch

from snippets.precision import fp8


@pytest.fixture(scope="module")
def gemm():
    g = torch.Generator().manual_seed(0)
    a = fp8.activations_with_outliers(256, 512, g)
    b = torch.randn(512, 256, generator=g, dtype=torch.float64) / 512 ** 0.5
    return a, b, a @ b


def test_blockwise_scaling_beats_per_tensor_with_outliers(gemm):
    a, b, ref = gemm
    tensor, block = fp8.rel_error(fp8.per_tensor(a, b), ref), fp8.rel_error(fp8.blockwise(a, b), ref)
    assert block < 0.9 * tensor, (block, tensor)


def test_without_outliers_the_recipes_are_close():
    g = torch.Generator().manual_seed(1)
    a, b = (torch.randn(*s, generator=g, dtype=torch.float64) for s in [(256, 512), (512, 256)])
    ref = a @ b
    tensor, block = fp8.rel_error(fp8.per_tensor(a, b), ref), fp8.rel_error(fp8.blockwise(a, b), ref)
    assert 0.9 < block / tensor < 1.05, (block, tensor)
    assert 0.01 < tensor < 0.1  # E4M3 keeps 3 mantissa bits: a few per cent, not more, not less


def test_quantize_stays_in_range_and_is_idempotent():
    x = torch.randn(1000, dtype=torch.float64) * 1000
    s = x.abs().max() / fp8.E4M3_MAX
    q = fp8.quantize(x, s)
    assert float(q.abs().max()) <= float(x.abs().max()) * (1 + 2 ** -3)
    assert torch.equal(fp8.quantize(q, s), q)


def test_loss_scaling_rescues_small_gradients():
    g = torch.Generator().manual_seed(2)
    grads = 10 ** (torch.rand(100_000, generator=g) * 8 - 10)  # 1e-10 .. 1e-2, log-uniform
    unscaled, scaled = fp8.underflow_fraction(grads, 1.0), fp8.underflow_fraction(grads, 2.0 ** 16)
    assert unscaled > 0.3 and scaled < 0.05, (unscaled, scaled)
    assert fp8.underflow_fraction(grads, 1.0, torch.bfloat16) == 0.0  # bf16 has fp32's exponent range


@pytest.mark.skipif(__import__("snippets.precision.fp8_gemm", fromlist=["x"]).fp8_supported() is not None,
                    reason="needs a CUDA GPU with FP8 tensor cores (compute capability 8.9 or 9.0)")
def test_fp8_gemm_is_close_to_bf16_and_timed():
    from snippets.precision.fp8_gemm import measure

    r = measure(1024, 1024, 1024)
    assert 0 < r["rel_error"] < 0.1 and r["bf16_ms"] > 0 and r["fp8_ms"] > 0


def test_per_tensor_scaling_loses_ordinary_values_only_when_outliers_exhaust_e4m3s_range():
    """E4M3 spans about 2^15 in normals: outliers a thousand sigmas wide leave ordinary values normal under one
    scale per tensor; a hundred thousand push them into subnormals, where 1x128 tiles keep most of them."""
    errors = {}
    for size in (100.0, 1e5):
        g = torch.Generator().manual_seed(3)
        a, cols = fp8.activations_and_outliers(256, 1024, g, size=size)
        errors[size] = fp8.ordinary_error(a, cols)
    assert abs(errors[100.0]["per_tensor"] / errors[100.0]["blockwise"] - 1) < 0.1, errors
    assert errors[1e5]["per_tensor"] > 3 * errors[1e5]["blockwise"], errors


@pytest.mark.gpu
def test_fine_grained_fp8_gemm_reads_its_scales_right():
    from snippets.precision import fp8_gemm

    if fp8_gemm.fp8_supported() is not None:
        pytest.skip(fp8_gemm.fp8_supported())
    layout, how = fp8_gemm.blockwise_layout()
    assert layout is not None, how
    assert fp8_gemm.measure_blockwise(512, 1024, 768, layout)["rel_error"] < 0.1
