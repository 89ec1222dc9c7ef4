"""snippets/ceilings on the CPU: the checks catch wrong results, the formulas match hand counts."""
import math

import pytest
import torch

from snippets.ceilings import bandwidth, matmul, roofline


@pytest.mark.parametrize("nbytes", [4096, 1 << 16, 3 * 1 << 14])
def test_copy_bandwidth_is_positive_and_finite(nbytes):
    gbps = bandwidth.copy_bandwidth_gbps(nbytes, "cpu")
    assert math.isfinite(gbps) and gbps > 0


def test_copy_check_catches_a_skipped_element():
    def copy_all_but_last(dst, src):
        dst[:-1].copy_(src[:-1])

    with pytest.raises(AssertionError, match="copy of 4096 bytes is wrong"):
        bandwidth.copy_bandwidth_gbps(4096, "cpu", copy=copy_all_but_last)


def test_copy_check_catches_a_wrong_value():
    def off_by_a_bit(dst, src):
        dst.copy_(src)
        dst[7] += 1e-3

    with pytest.raises(AssertionError, match="is wrong"):
        bandwidth.copy_bandwidth_gbps(4096, "cpu", copy=off_by_a_bit)


def test_copy_sweep_rows_and_hbm_pick():
    rows = bandwidth.copy_sweep([1 << 12, 1 << 14], "cpu")
    assert [r[0] for r in rows] == [1 << 12, 1 << 14]
    assert all(len(r) == 3 and r[1] > 0 and r[2] > 0 for r in rows)
    fake = [[1 << 20, 900.0, 5000.0], [1 << 28, 3000.0, 3100.0], [1 << 30, 3200.0, 3150.0]]
    assert bandwidth.hbm_bandwidth_gbps(fake, l2_bytes=50 << 20) == 3200.0  # only sizes >= 4 x L2
    assert bandwidth.hbm_bandwidth_gbps(fake, l2_bytes=1 << 30) == 3200.0  # none that big: the largest
    assert bandwidth.hbm_bandwidth_gbps(fake, l2_bytes=None) == 3200.0
    assert bandwidth.l2_cache_bytes("cpu") is None


def test_copy_plot_has_both_curves():
    fig = bandwidth.plot_copy_sweep([[1 << 12, 10.0, 20.0], [1 << 14, 11.0, 21.0]], l2_bytes=1 << 13)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert [len(line.get_xdata()) for line in ax.get_lines()[:2]] == [2, 2]
    assert list(ax.get_lines()[2].get_xdata()) == [1 << 12, 1 << 12]  # src + dst fill the L2 at half its size


@pytest.mark.parametrize("dtype", ["fp32", "tf32", "bf16", "fp16"])
@pytest.mark.parametrize("shape", [(64, 48, 32), (1, 96, 80), (33, 17, 129)])
def test_matmul_tflops_checks_and_measures(shape, dtype):
    tflops = matmul.matmul_tflops(*shape, dtype, "cpu")
    assert math.isfinite(tflops) and tflops > 0


def test_matmul_check_passes_fp32_and_fails_wrong_results():
    a, b = torch.randn(40, 30), torch.randn(30, 20)
    out = a @ b
    assert matmul.check_matmul(out, a, b, "fp32") < 1e-5
    wrong = out.clone()
    wrong[3, 4] += 1.0
    with pytest.raises(AssertionError, match="relative error"):
        matmul.check_matmul(wrong, a, b, "fp32")
    with pytest.raises(AssertionError):
        matmul.check_matmul(a @ b.flip(0), a, b, "bf16")  # wrong inputs fail even the loose tolerance
    unwritten = out.clone()
    unwritten[0, 0] = float("nan")
    with pytest.raises(AssertionError):
        matmul.check_matmul(unwritten, a, b, "bf16")


def test_matmul_catches_a_wrong_kernel(monkeypatch):
    real = torch.matmul

    def one_percent_off(a, b, out=None):
        return real(a, b * 1.01, out=out)

    monkeypatch.setattr(torch, "matmul", one_percent_off)
    with pytest.raises(AssertionError):
        matmul.matmul_tflops(16, 16, 16, "fp32", "cpu")


def test_precision_is_restored():
    before = torch.get_float32_matmul_precision()
    with matmul.float32_precision("tf32"):
        assert torch.get_float32_matmul_precision() == "high"
    with matmul.float32_precision("fp32"):
        assert torch.get_float32_matmul_precision() == "highest"
    assert torch.get_float32_matmul_precision() == before


def test_matmul_sweep_and_dtypes():
    assert matmul.matmul_dtypes("cpu") == ["bf16", "tf32", "fp32"]
    rows = matmul.matmul_sweep([(8, 8, 8), (4, 16, 8)], ["fp32", "bf16"], "cpu")
    assert [r[:4] for r in rows] == [[8, 8, 8, "fp32"], [8, 8, 8, "bf16"], [4, 16, 8, "fp32"], [4, 16, 8, "bf16"]]


def test_gemm_intensity_hand_count():
    # 4x4x4 in bf16: 2*64 = 128 flops; A, B, C are 16 elements each, 2 bytes -> 96 bytes.
    assert roofline.gemm_intensity(4, 4, 4, 2) == pytest.approx(128 / 96)
    # GEMV 1 x 8192 x 8192 in bf16 is ~1 FLOP/byte: B dominates the bytes.
    assert roofline.gemm_intensity(1, 8192, 8192, 2) == pytest.approx(2 * 8192 * 8192 / (2 * (8192 + 8192**2 + 8192)))
    assert roofline.gemm_intensity(8192, 8192, 8192, 2) == pytest.approx(8192 / 3)
    assert roofline.gemm_intensity(8192, 8192, 8192, 4) == pytest.approx(8192 / 6)


def test_shape_labels():
    assert roofline.shape_label(8192, 8192, 8192) == "8192³"
    assert roofline.shape_label(1, 8192, 8192) == "1×8192×8192"


def test_attainable_is_the_min_of_the_two_roofs():
    # 1000 GB/s, 100 TFLOP/s: ridge at 100 FLOP/byte.
    assert roofline.ridge_point(100.0, 1000.0) == pytest.approx(100.0)
    assert roofline.attainable_tflops(10.0, 100.0, 1000.0) == pytest.approx(10.0)  # memory-bound
    assert roofline.attainable_tflops(100.0, 100.0, 1000.0) == pytest.approx(100.0)  # at the ridge
    assert roofline.attainable_tflops(1e4, 100.0, 1000.0) == pytest.approx(100.0)  # compute-bound


def test_roofline_plot_places_every_point():
    points = [("8192³", "bf16", 2730.7, 700.0), ("1×8192²", "bf16", 1.0, 3.0),
              ("8192³", "fp32", 1365.3, 50.0)]
    fig = roofline.plot_roofline(points, {"bf16": 750.0, "fp32": 55.0}, 4000.0)
    ax = fig.axes[0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert sum(len(c.get_offsets()) for c in ax.collections) == len(points)
    assert len(ax.get_lines()) == 2  # one roof per dtype
    assert {t.get_text() for t in ax.texts} == {"8192³", "1×8192²"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_paths_check_and_measure():
    for warm in (False, True):
        assert bandwidth.copy_bandwidth_gbps(1 << 24, "cuda", warm_l2=warm) > 0
    for dtype in matmul.matmul_dtypes("cuda"):
        assert matmul.matmul_tflops(512, 384, 256, dtype, "cuda") > 0
