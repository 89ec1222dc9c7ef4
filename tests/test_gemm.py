"""snippets/gemm on the CPU: every hand-written Hopper step compiled (not run) for sm_90a by nvcc, with its
ptxas report (registers, spills, setmaxnreg honoured) and its SASS (HGMMA, UTMALDG, ...); the Triton GEMMs
in the interpreter against an fp32 reference on fresh random inputs with poisoned outputs; the tile order
(Python and the CUDA header built for the host) and the timeline model. Failures print their seeds."""
import subprocess

import pytest
import torch

from snippets.common.checks import empty, poisoned_outputs
from snippets.gemm import bench, gen_wgmma, hopper, schedule, triton_ws

pytestmark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")

NVCC = hopper.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="no nvcc on PATH, in /usr/local/cuda or from the pip wheel "
                                "nvidia-cuda-nvcc: the CUDA steps cannot be compiled here")


def test_wgmma_header_is_current():
    assert gen_wgmma.HEADER.read_text() == gen_wgmma.render(), "run `python -m snippets.gemm.gen_wgmma`"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("hgemm")
    return {s: hopper.inspect(s, out, NVCC) for s in hopper.STEPS}


@needs_nvcc
@pytest.mark.parametrize("step", list(hopper.STEPS))
def test_step_compiles_for_sm90a_and_the_sass_shows_it(step, compiled):
    r = compiled[step]
    s, ops = hopper.STEPS[step], r["summary"]
    assert r["warnings"] == [], r["warnings"]  # no C7508 (setmaxnreg ignored), no wgmma serialisation
    assert r["ptxas"]["spill_stores"] == r["ptxas"]["spill_loads"] == r["ptxas"]["stack_bytes"] == 0, r["ptxas"]
    # one wgmma per 16 of K in the 64-wide slab: four HGMMA of the step's tile width
    assert r["hgmma_shapes"] == [f"64x{s.tile[1]}x16"] and ops["HGMMA"] == 4, r["ops"]
    assert ops["UTMALDG"] >= 2, r["ops"]  # the A and B bulk tensor copies
    assert any(op.startswith("SYNCS.PHASECHK") for op in r["ops"]), r["ops"]  # mbarrier try_wait.parity
    assert any(op.startswith("SYNCS.ARRIVE.TRANS64") for op in r["ops"]), r["ops"]  # arrive(.expect_tx)
    if s.tma_store:
        assert ops["UTMASTG"] == 4 and ops["STG"] == 0 and ops["STS"] > 0, r["ops"]
    else:
        assert ops["UTMASTG"] == 0 and ops["STG"] == s.tile[1] // 4, r["ops"]  # BN / 8 groups x 2 rows
    if step >= 3:  # the register split: the entry count is 65536 / 384 rounded down to 8, then dec/inc
        assert r["ptxas"]["registers"] == 168, r["ptxas"]
        assert ops["USETMAXREG"] == 2, r["ops"]
        assert any(op.startswith("USETMAXREG.DEALLOC") for op in r["ops"])
        assert any(op.startswith("USETMAXREG.TRY_ALLOC") for op in r["ops"])
    else:
        assert ops["USETMAXREG"] == 0 and r["ptxas"]["registers"] <= 128, r["ptxas"]


@needs_nvcc
def test_setmaxnreg_is_ignored_without_launch_bounds(tmp_path):
    r = hopper.compile_cubin(3, tmp_path, NVCC, drop_launch_bounds=True)
    assert any("C7508" in w for w in r["warnings"]), r["warnings"]


def test_parse_ptxas():
    sample = ("ptxas info    : Compiling entry function '_ZN5hgemm5step36kernelE' for 'sm_90a'\n"
              "ptxas info    : Function properties for _ZN5hgemm5step36kernelE\n"
              "    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
              "ptxas info    : Used 168 registers, used 16 barriers\n")
    assert hopper.parse_ptxas(sample) == {"_ZN5hgemm5step36kernelE": {
        "registers": 168, "spill_stores": 4, "spill_loads": 12, "stack_bytes": 8, "barriers": 16}}


def test_sass_ops_reads_predicated_instructions():
    text = ("        /*0480*/                   SYNCS.ARRIVE.TRANS64 RZ, [UR8+0x6000], R0 ;\n"
            "        /*04a0*/                   UTMALDG.2D [UR8], [UR6] ;\n"
            "        /*09b0*/              @!P0 STG.E desc[UR4][R4.64], R25 ;\n"
            "        /*0320*/                   @!UP0 SYNCS.EXCH.64 URZ, [UR6+0x6000], UR4 ;\n"
            "        /*0770*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24, gsb0 ;\n")
    ops = hopper.sass_ops(text)
    assert ops == {"SYNCS.ARRIVE.TRANS64": 1, "UTMALDG.2D": 1, "STG.E": 1, "SYNCS.EXCH.64": 1,
                   "HGMMA.64x128x16.F32.BF16": 1}
    assert hopper.sass_summary(ops)["SYNCS"] == 2


@pytest.mark.parametrize("shape", [(100, 12, 8), (64, 64, 7), (0, 8, 8), (64, 7, 64)])
def test_hand_written_steps_reject_shapes_tma_cannot_describe(shape):
    m, n, k = shape
    a, b = torch.zeros(max(m, 1), k, dtype=torch.bfloat16), torch.zeros(n, k, dtype=torch.bfloat16)
    if k % 8 == 0 and n % 8 == 0 and m > 0:
        hopper.check_shapes(m, n, k)  # fine: no GPU needed to say so
        return
    with pytest.raises(ValueError, match="multiples of 8"):
        hopper.gemm(1, a if m else a[:0], b)


# ---------------------------------------------------------------- Triton, in the interpreter

SMALL = [(37, 40, 24), (64, 72, 136), (5, 8, 8), (70, 33, 45)]


def report(reports):
    return "; ".join(f"{r['shape']} seed {r['seed']}: max err {r['max_abs_err']:.3g} at {r['worst']}"
                     for r in reports if not r["ok"])


def test_portable_triton_gemm_matches_fp32_reference():
    reports = bench.check(triton_ws.portable_matmul, SMALL, device="cpu")
    assert all(r["ok"] for r in reports), report(reports)
    assert all(r["not_finite"] == 0 for r in reports)


@pytest.mark.parametrize("ws", [True, False], ids=["warp_specialize", "plain"])
def test_descriptor_triton_gemm_matches_fp32_reference(ws):
    shapes = [s for s in SMALL if s[1] % 8 == 0 and s[2] % 8 == 0]
    reports = bench.check(lambda a, b: triton_ws.ws_matmul(a, b, warp_specialize=ws), shapes, device="cpu")
    assert all(r["ok"] for r in reports), report(reports)


def test_compare_catches_unwritten_and_wrong_elements():
    a, b = bench.inputs(16, 24, 32, device="cpu")
    ref = bench.reference(a, b)
    good = ref.bfloat16()
    assert bench.compare(good, ref)["ok"]
    hole = good.clone()
    hole[3, 5] = float("nan")
    r = bench.compare(hole, ref)
    assert not r["ok"] and r["not_finite"] == 1 and r["worst"] == (3, 5)
    off = good.clone()
    off[7, 1] += 1.0
    r = bench.compare(off, ref)
    assert not r["ok"] and r["over_bound"] >= 1 and r["worst"] == (7, 1)


def test_poisoned_outputs_are_restored():
    with poisoned_outputs():
        assert torch.isnan(empty((2, 2), torch.float32, "cpu")).all()
        assert torch.isnan(triton_ws.portable_matmul(*bench.inputs(3, 8, 8, torch.float32, "cpu", 0))).sum() == 0
    assert not torch.isnan(empty((2, 2), torch.float32, "cpu").zero_()).any()


# ---------------------------------------------------------------- tile order and timeline

@pytest.mark.parametrize("tiles_m, tiles_n, group_m", [(64, 32, 8), (7, 5, 3), (1, 9, 8), (10, 1, 4), (13, 11, 1)])
def test_grouped_tile_order_visits_every_tile_once(tiles_m, tiles_n, group_m):
    order = [schedule.grouped_tile(t, tiles_m, tiles_n, group_m) for t in range(tiles_m * tiles_n)]
    assert sorted(order) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]
    # within a group the row changes fastest: consecutive tiles share a B column block
    first = order[: min(group_m, tiles_m)]
    assert [n for _, n in first] == [0] * len(first) and [m for m, _ in first] == list(range(len(first)))


def test_persistent_assignment_and_l2_footprint():
    per_cta = schedule.persistent_assignment(64, 32, 132, 8)
    flat = [t for tiles in per_cta for t in tiles]
    assert len(per_cta) == 132 and sorted(flat) == [(m, n) for m in range(64) for n in range(32)]
    assert max(map(len, per_cta)) - min(map(len, per_cta)) <= 1  # 2048 tiles: 15 or 16 per CTA
    rows_g, cols_g = schedule.wave_footprint(64, 32, 132, 8)
    rows_r, cols_r = schedule.wave_footprint(64, 32, 132, 1)
    assert (rows_g, cols_g) == (8, 17) and (rows_r, cols_r) == (5, 32)
    assert rows_g * 256 + cols_g * 128 < rows_r * 256 + cols_r * 128  # fewer A + B blocks (sizes 128, 256 rows)


def test_cuda_tile_order_matches_python(host_check):
    exe = host_check("order", '#include <cstdio>\n#include <cstdlib>\n#include "tile_order.cuh"\n'
                     "int main(int, char** argv) {\n"
                     "  const int tm = std::atoi(argv[1]), tn = std::atoi(argv[2]), g = std::atoi(argv[3]);\n"
                     "  for (int t = 0; t < tm * tn; ++t) {\n"
                     "    const hgemm::TileCoord c = hgemm::grouped_tile(t, tm, tn, g);\n"
                     '    std::printf("%d %d\\n", c.m, c.n);\n  }\n}\n', hopper.CSRC)
    for tm, tn, g in [(64, 32, 8), (7, 5, 3), (13, 11, 1)]:
        out = subprocess.run([str(exe), str(tm), str(tn), str(g)], check=True, capture_output=True, text=True)
        host = [tuple(map(int, line.split())) for line in out.stdout.splitlines()]
        assert host == [schedule.grouped_tile(t, tm, tn, g) for t in range(tm * tn)]


def test_timeline_follows_the_barrier_rules():
    stages, k_tiles = 3, 7
    ev = schedule.pipeline_timeline(k_tiles, stages, tiles=2, load=3.0, mma=1.0)
    loads = [e for e in ev if e["kind"] == "tma"]
    mmas = [e for e in ev if e["kind"] == "mma" and e["lane"] == "consumer 0"]
    assert len(loads) == len(mmas) == 2 * k_tiles
    for i, (ld, mm) in enumerate(zip(loads, mmas)):
        assert mm["start"] >= ld["start"] + ld["duration"] - 1e-9  # full barrier: data has landed
        if i >= stages:  # empty barrier: the slab that used this stage before is finished
            prev = mmas[i - stages]
            assert ld["start"] >= prev["start"] + prev["duration"] - 1e-9
    in_flight = max(sum(1 for o in loads if o["start"] <= e["start"] < o["start"] + o["duration"]) for e in loads)
    assert in_flight <= stages
    assert schedule.busy_fraction(ev) > 2 * schedule.busy_fraction(schedule.serial_timeline(k_tiles), "warpgroup")
