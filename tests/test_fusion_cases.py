"""snippets/fusion/{gemm,slowdown,bench} on the CPU: the GEMM with each fused variant and every slowdown kernel
against fp64 references in Triton's interpreter (outputs poisoned, fresh inputs), the checks that guard each
timing (they must reject wrong outputs), the occupancy rule, and the measurement functions end to end at toy
sizes. The timings themselves are the GPU run's (results/)."""

import pytest
import torch
import torch.nn.functional as F

from snippets.common.checks import fresh_seed, poisoned_outputs
from snippets.fusion import add_layernorm as al
from snippets.fusion import bench
from snippets.fusion import gemm as gm
from snippets.fusion import slowdown as sd

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")]

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 8e-3}


def gen():
    seed = fresh_seed()
    print("generator seed", seed)
    return torch.Generator().manual_seed(seed)


@pytest.fixture
def poisoned():
    with poisoned_outputs():
        yield


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("variant", ["plain", "bias_gelu", "prologue_gelu", "row_norm"])
@pytest.mark.parametrize("shape", [(70, 45, 50), (33, 64, 96), (1, 17, 8)], ids=lambda s: "x".join(map(str, s)))
def test_gemm_variants_match_reference(shape, variant, dtype, poisoned):
    m, n, k = shape
    g = gen()
    a = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randn(n, k, generator=g).to(dtype)  # [N, K] like a linear layer: B = w.t() is not contiguous
    kw = {"plain": {}, "bias_gelu": {"bias": torch.randn(n, generator=g).to(dtype), "gelu": True},
          "prologue_gelu": {"prologue_gelu": True}, "row_norm": {"norm_weight": torch.randn(n, generator=g).to(dtype)}}[variant]
    config = gm.row_norm_configs(n)[0] if variant == "row_norm" else gm.SMOKE
    c = gm.gemm(a, w.t(), config=config, **kw)
    assert c.dtype == dtype and torch.isfinite(c).all()
    bench.check(variant, c, gm.gemm_ref(a, w.t(), **kw), TOL[dtype])


def test_eager_baselines_match_reference():
    g = gen()
    a, w, bias = torch.randn(40, 24, generator=g), torch.randn(32, 24, generator=g), torch.randn(32, generator=g)
    ref = gm.gemm_ref(a, w.t(), bias, gelu=True)
    for fn in (gm.bias_gelu_unfused, gm.bias_gelu_addmm):
        bench.check(fn.__name__, fn(a, w.t(), bias), ref, 1e-5)


def test_gemm_rejects_bad_shapes():
    a, b = torch.randn(8, 16), torch.randn(12, 8)
    with pytest.raises(ValueError, match="inner dimensions"):
        gm.gemm(a, b)
    with pytest.raises(ValueError, match="BLOCK_N >= N"):
        gm.gemm(torch.randn(8, 16), torch.randn(16, 100), norm_weight=torch.randn(100), config=gm.SMOKE)


def test_row_norm_configs_cover_the_row():
    for n in (45, 1024, 1536):
        assert all(c.block_n >= n and c.block_n & (c.block_n - 1) == 0 for c in gm.row_norm_configs(n))


@pytest.mark.parametrize("warps", [1, 4])
def test_wide_add_layernorm_matches_unfused(warps, poisoned):
    g = gen()
    x, r = torch.randn(3, 700, generator=g), torch.randn(3, 700, generator=g)
    w, b = 1 + 0.5 * torch.randn(700, generator=g), torch.randn(700, generator=g)
    y, h, _ = sd.wide_add_layernorm(x, r, w, b, warps)
    y_ref, h_ref = sd.unfused_add_layernorm(x.double(), r.double(), w.double(), b.double())
    bench.check("y", y, y_ref, 1e-5)
    bench.check("h", h, h_ref, 1e-6)


def test_sum_of_squares_three_ways(poisoned):
    g = gen()
    x, y = torch.randn(5, 3000, generator=g), torch.randn(5, 3000, generator=g)
    rx, ry = x.double().square().sum(1), y.double().square().sum(1)
    bench.check("one", sd.sumsq(x, block=512), rx, 1e-6)
    for serial in (True, False):
        ox, oy = sd.sumsq_pair(x, y, serial, block=512)
        bench.check(f"x serial={serial}", ox, rx, 1e-6)
        bench.check(f"y serial={serial}", oy, ry, 1e-6)
    with pytest.raises(ValueError, match="one shape"):
        sd.sumsq_pair(x, y[:, :10], serial=True)


def test_resident_warps_follows_the_occupancy_rule():
    # 255 registers: ceil(255 * 32 / 256) * 256 = 8192 per warp, so one 8-warp block fills the 64K registers
    assert sd.resident_warps(255, 8, 32) == 8
    # 60 registers round up to 64: 2048 per warp, one 32-warp block is exactly 64K
    assert sd.resident_warps(60, 32, 128) == 32
    # 32 registers, 4 warps: 16 blocks by registers, but 200 KB of shared memory allows only one
    assert sd.resident_warps(32, 4, 200_000) == 4
    # nothing limits but the 64-warp ceiling
    assert sd.resident_warps(32, 4, 0) == 64


def test_check_rejects_nan_and_large_errors():
    ref = torch.randn(100, dtype=torch.float64)
    assert bench.check("same", ref.float(), ref, 1e-6) < 1e-6
    with pytest.raises(AssertionError, match="bad"):
        bench.check("bad", ref + 0.1, ref, 1e-3)
    with pytest.raises(AssertionError, match="nan"):
        bench.check("nan", torch.where(ref > 1, float("nan"), ref), ref, 1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_own_dropout_check_accepts_eager_and_rejects_wrong_outputs(dtype):
    g = gen()
    x, r = (torch.randn(400, 256, generator=g).to(dtype) for _ in range(2))
    w, b = (1 + 0.5 * torch.randn(256, generator=g)).to(dtype), torch.randn(256, generator=g).to(dtype)
    y, h = al.add_layernorm_eager(x, r, w, b, p=0.2)
    frac = bench.check_own_dropout("eager", y, h, x, r, w, b, 0.2, dtype)
    assert abs(frac - 0.8) < 0.01
    with pytest.raises(AssertionError, match="neither"):  # scaled for another p
        bench.check_own_dropout("wrong p", y, h, x, r, w, b, 0.3, dtype)
    with pytest.raises(AssertionError, match="kept fraction"):  # nothing dropped
        y0, h0 = al.add_layernorm_eager(x, r, w, b, p=0.0)
        bench.check_own_dropout("no dropout", y0, x / 0.8 + r, x, r, w, b, 0.2, dtype)
    with pytest.raises(AssertionError, match="stale y y: relative error"):  # y not the norm of h
        bench.check_own_dropout("stale y", F.layer_norm(r, (256,), w, b), h, x, r, w, b, 0.2, dtype)


def test_measurements_run_end_to_end_on_the_cpu():
    """The lab's measurement functions at toy sizes: every check inside them passes on correct kernels."""
    fwd = bench.layernorm_forward(8, 96, torch.bfloat16, "cpu", p=0.25)
    assert set(fwd["ms"]) == {"triton", "eager"} and all(v > 0 for v in fwd["gbps"].values())
    bwd = bench.layernorm_backward(8, 96, torch.float32, "cpu")
    assert set(bwd["ms"]) == {"triton", "eager"}
    ep = bench.epilogue(40, 48, 32, torch.bfloat16, "cpu", [gm.SMOKE], with_compile=False)
    assert ep["config"] == str(gm.SMOKE) and {"triton_fused", "eager_unfused", "addmm_gelu"} <= set(ep["ms"])
    spill = bench.case_register_pressure(2, 300, torch.float32, "cpu", fused_warps=1, fixed_warps=4)
    assert set(spill["ms"]) == {"fused", "fused_fixed", "unfused"}
    conc = bench.case_lost_concurrency(3, 2000, "cpu")
    assert conc["programs"] == {"fused_serial": 3, "each_reduction": 3, "fused_joined_grids": 6}
    tile = bench.case_tile_mismatch(24, 40, 32, torch.bfloat16, "cpu", [gm.SMOKE])
    block_m = int(tile["configs"]["fused"].split("x")[0])
    assert tile["b_bytes_read"]["fused"] == -(-24 // block_m) * 32 * 40 * 2  # B once per row block
    pro = bench.case_prologue_recompute(24, 40, 32, torch.bfloat16, "cpu", [gm.SMOKE])
    assert pro["gelu_evaluations"] == {"fused": 24 * 32 * 2, "unfused": 24 * 32}


def test_tune_reports_configs_that_do_not_fit():
    import triton

    def run(cfg):
        if cfg.block_m > 32:
            raise triton.runtime.errors.OutOfResources(300000, 232448, "shared memory")
        return torch.ones(3)

    best, ms, rows = bench.tune("toy", run, torch.ones(3, dtype=torch.float64),
                                [gm.SMOKE, gm.Config(64, 32, 32, 4, 1)], "cpu", 1e-6)
    assert best == gm.SMOKE and ms > 0
    assert rows[1][0] == str(gm.Config(64, 32, 32, 4, 1)) and rows[1][1].startswith("does not fit")
    with pytest.raises(bench.NoConfigFits, match="no config fits"):
        bench.tune("toy", run, torch.ones(3, dtype=torch.float64), [gm.Config(64, 32, 32, 4, 1)], "cpu", 1e-6)


def test_backward_launch_sweep_checks_each_choice():
    rows = bench.sweep_bwd_launch(8, 96, torch.float32, "cpu", rows=(1, 2), warps=(1, 4), per_sm=(1, 3))
    assert [r[1:3] for r in rows] == [[bm, w] for bm in (1, 2) for w in (1, 4) for _ in (1, 3)]
    # 8 rows over 3 programs: 3 rows each at BLOCK_M 1 (3 programs), 4 rows each at BLOCK_M 2 (2 programs)
    assert [r[3] for r in rows] == [1, 3, 1, 3, 1, 2, 1, 2]
    assert all(r[0] == 96 and r[4] > 0 for r in rows)
