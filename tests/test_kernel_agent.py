"""snippets/kernel_agent on the CPU (Triton's interpreter): every honest candidate of every task is accepted;
the rules judge what ran; the timing cross-check, the digests, the comparison, fast_p, the loop and the CLI."""
import json
import random
import subprocess
import sys

import pytest
import torch

from snippets.kernel_agent import checks, rules, static, timing
from snippets.kernel_agent.candidates import CHEATS, CUDA, HONEST, REFERENCE, softmax
from snippets.kernel_agent.harness import DEVICE, Report, evaluate, evaluate_many, fast_p
from snippets.kernel_agent.loop import LLMProposer, ScriptedProposer, run_loop
from snippets.kernel_agent.sandbox import ROOT
from snippets.kernel_agent.tasks import TASKS
from snippets.kernel_agent.worker import digest, make_inputs

SOFTMAX = TASKS["softmax"]


@pytest.fixture(scope="module")
def honest_reports():
    return evaluate_many([(TASKS[t], n, s) for t, n, s in HONEST + CUDA], workers=2)


@pytest.mark.parametrize("i", range(len(HONEST + CUDA)), ids=[n for _, n, _ in HONEST + CUDA])
def test_every_honest_candidate_is_accepted(honest_reports, i):
    report = honest_reports[i]
    if report.name in {n for _, n, _ in CUDA} and DEVICE == "cpu":
        assert report.verdict == "skipped" and "needs CUDA" in report.reason  # load_inline builds for a GPU
        return
    assert report.verdict == "accepted", report.summary()
    assert report.trials >= 4 and report.speedup > 0 and report.max_error is None


def test_twelve_tasks_at_two_levels_each_with_an_honest_reference():
    assert len(TASKS) >= 12 and set(REFERENCE) == set(TASKS)
    assert {t.level for t in TASKS.values()} == {1, 2}


def test_the_static_check_only_advises():
    """A finding of the static check is a warning; the verdict comes from what ran."""
    src = REFERENCE["softmax"].replace("def kernel(x, out):\n    launch(x, out)",
                                       "def kernel(x, out):\n    try:\n        launch(x, out)\n    except ValueError:\n        raise")
    assert src != REFERENCE["softmax"]
    report = evaluate(SOFTMAX, src)
    assert report.correct and any(w.startswith(static.TRY_FALLBACK) for w in report.warnings), report.summary()
    laundered = softmax.HEADER + softmax.ROWS_KERNEL + (
        "import operator\n\n\ndef kernel(x, out):\n    out.copy_(operator.methodcaller('softmax', -1)(x))\n")
    assert static.check_source(laundered, SOFTMAX) == []  # the spelling hides it from the static check
    report = evaluate(SOFTMAX, laundered)
    assert report.reason.startswith(rules.LIBRARY_WORK) and "aten::softmax" in report.reason, report.summary()


@pytest.mark.parametrize("profile, device, problem", [
    ({"CPU\taten::empty": [1, 5], "CPU\taten::copy_": [2, 9]}, "cpu", rules.NO_KERNEL),
    ({"CPU\taten::exp": [1, 5]}, "cpu", rules.LIBRARY_WORK),
    ({"CUDA\tsoftmax_rows": [1, 900_000], "CUDA\tvoid at::native::vectorized_elementwise_kernel<4, "
      "at::native::FillFunctor<float>>": [1, 5]}, "cuda", None),
    ({"CUDA\tsoftmax_rows": [1, 900_000], "CUDA\tsm90_xmma_gemm_f32f32_tf32f32_f32_nn": [1, 5]}, "cuda",
     rules.LIBRARY_WORK),
    ({"CUDA\tsoftmax_rows_helper": [1, 900_000]}, "cuda", rules.LIBRARY_WORK),  # a name that only contains ours
    ({"CUDA\tsoftmax_rows": [1, 1_000]}, "cuda", rules.HOST_WORK),  # 1 us of kernel in a 1 ms call
    ({"CUDA\tMemcpy DtoH (Device -> Pageable)": [1, 5]}, "cuda", rules.NO_KERNEL),
])
def test_rules_judge_what_ran(profile, device, problem):
    found = rules.judge(profile, REFERENCE["softmax"], device, {}, measured_ms=1.0, calls=1)
    assert (found is None) if problem is None else found.startswith(problem), found


def test_own_kernels_are_read_from_triton_and_cuda_sources():
    assert rules.own_kernels(REFERENCE["softmax"]) == {"softmax_rows"}
    assert rules.own_kernels(CUDA[0][2]) == {"add_rmsnorm_kernel"}
    assert rules._ours("_Z18add_rmsnorm_kernelPKfS0_S0_Pfif", {"add_rmsnorm_kernel"})


def test_the_clock_check_allows_the_launchers_share_and_no_more():
    base = timing.Baseline([timing.Measured([1.0] * 8, wall_ms=8.0 + w) for w in (9.0, 2.4, 2.2)])
    assert base.launcher_ms == pytest.approx(2.4)  # the most the honest launcher needed, once warm
    assert timing.unexplained(timing.Measured([0.5] * 8, 4.0 + 2.6), base, "cuda") is None
    forged = timing.unexplained(timing.Measured([0.05] * 8, 4.0 + 2.6), base, "cuda")  # 3.6 ms hidden
    assert forged and "harness's clock measured 6.6 ms" in forged


def test_digests_are_exact_across_calls_and_see_every_element():
    t = torch.randn(33, 17)
    key = random.getrandbits(62)
    assert digest(t, key) == digest(t.clone(), key)
    u = t.clone()
    u[32, 16] = torch.nextafter(u[32, 16], torch.tensor(float("inf")))
    assert digest(u, key) != digest(t, key)
    assert digest(t.flip(0), key) != digest(t, key) and digest(t, key) != digest(t, key + 2)


def test_inputs_are_rebuilt_bit_for_bit_from_their_seed():
    specs = TASKS["cross_entropy"].specs({"M": 5, "N": 40}, "shifted")
    a, b = make_inputs(specs, 7, "cpu"), make_inputs(specs, 7, "cpu")
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and a[1].dtype == torch.int64
    assert int(a[1].max()) < 40 and float(a[0].mean()) > 10  # targets in range; logits shifted
    assert not torch.equal(make_inputs(specs, 8, "cpu")[0], a[0])


def test_cli_evaluates_a_candidate_file(tmp_path):
    path = tmp_path / "softmax.py"
    run = [sys.executable, "-m", "snippets.kernel_agent"]
    shown = subprocess.run(run + ["show", "--task", "softmax"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    path.write_text(shown.stdout)
    p = subprocess.run(run + ["evaluate", "--task", "softmax", "--candidate", str(path), "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stdout)
    assert report["verdict"] == "accepted" and report["speedup"] > 0 and report["device"] == DEVICE
    (tmp_path / "bad.py").write_bytes(b"\xff\xfe")
    for args, message in [(["--task", "nope", "--candidate", str(path)], "unknown task 'nope'"),
                          (["--task", "softmax", "--candidate", str(tmp_path / "missing.py")], "cannot read it"),
                          (["--task", "softmax", "--candidate", str(tmp_path / "bad.py")], "cannot read it")]:
        p = subprocess.run(run + ["evaluate", *args], capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert p.returncode == 2 and message in p.stderr, p.stderr
    p = subprocess.run(run + ["evaluate", "--task", "softmax", "--candidate", str(path.with_name("k.py"))],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 2


def test_a_rejected_candidate_exits_1(tmp_path):
    path = tmp_path / "cheat.py"
    path.write_text(next(c for c in CHEATS if c.name == "nothing_written").source)
    p = subprocess.run([sys.executable, "-m", "snippets.kernel_agent", "evaluate", "--task", "softmax",
                        "--candidate", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert p.returncode == 1 and checks.NOT_WRITTEN in p.stdout


def test_compare_names_each_failure():
    ref = torch.softmax(torch.randn(4, 8, dtype=torch.float64), -1)
    out = ref.float()
    assert checks.compare(out, ref, 1e-6, 1e-5)[0] is None
    assert checks.compare(torch.full_like(out, float("nan")), ref, 1e-6, 1e-5)[0].startswith(checks.NOT_WRITTEN)
    part = out.clone()
    part[2, 5] = float("nan")
    problem = checks.compare(part, ref, 1e-6, 1e-5)[0]
    assert problem.startswith(checks.PARTIAL) and "(2, 5), 1 of 32" in problem
    assert checks.compare(out.bfloat16().float(), ref, 1e-6, 1e-5)[0].startswith(checks.LOW_PRECISION)
    assert checks.compare(out.flip(0), ref, 1e-6, 1e-5)[0].startswith(checks.WRONG)
    stale = torch.rand(4, 8)
    assert checks.compare(stale, ref, 1e-6, 1e-5, earlier=[stale.clone()])[0].startswith(checks.CACHED)


def test_secret_shapes_are_stratified_and_differ_between_evaluations():
    shapes = SOFTMAX.draw_shapes(random.Random(1), "smoke", 3)
    assert sorted(s["N"] // 100 for s in shapes) == [0, 1, 2]  # one small, one middle, one large
    a, b = (SOFTMAX.draw_shapes(random.Random(), "smoke", 3) for _ in range(2))
    assert a != b


def test_fast_p_on_a_hand_made_list():
    def rep(verdict, speedup):
        return Report("t", "c", verdict=verdict, speedup=speedup)

    reports = [rep("accepted", 0.5), rep("accepted", 1.2), rep("accepted", 2.5), rep("rejected", None),
               rep("timeout", None)]
    assert [fast_p(reports, p) for p in (0, 1, 1.5, 2)] == [0.6, 0.4, 0.2, 0.2]
    assert fast_p([rep("accepted", 1.0)], 1) == 0.0  # strictly faster than p
    assert fast_p([], 1) == 0.0


def test_scripted_loop_stops_at_the_target():
    cheat = next(c for c in CHEATS if c.name == "try_except_fallback")
    proposer = ScriptedProposer([cheat.source, softmax.LOOPED, softmax.FUSED])
    result = run_loop(SOFTMAX, proposer, target=0.0, budget=5)  # on the CPU any correct kernel meets 0x
    assert [r.verdict for r in result.history] == ["rejected", "accepted"]
    assert result.stopped.startswith("target") and result.best is result.history[1]
    assert rules.LIBRARY_WORK in proposer.seen[0].text()  # the proposer read why round 1 failed


def test_scripted_loop_stops_at_the_budget_and_when_out_of_ideas():
    def judge(task, source, name, **kw):  # stands for evaluate(): speedups 0.8x, 1.2x, 1.4x, ...
        return Report(task.name, name, verdict="accepted", speedup=0.6 + 0.2 * int(name.split()[-1]))

    result = run_loop(SOFTMAX, ScriptedProposer(["a"] * 9), target=1.5, budget=3, judge=judge)
    assert result.stopped.startswith("budget") and len(result.history) == 3
    assert result.best.speedup == pytest.approx(1.2)
    result = run_loop(SOFTMAX, ScriptedProposer(["a"] * 9), target=1.3, budget=9, judge=judge)
    assert result.stopped.startswith("target") and len(result.history) == 4
    result = run_loop(SOFTMAX, ScriptedProposer(["a"]), budget=9, judge=judge)
    assert result.stopped == "proposer has nothing more" and len(result.history) == 1


def test_llm_proposer_takes_any_client_function():
    cheat = next(c for c in CHEATS if c.name == "torch_does_the_work")
    replies = iter([f"Here it is:\n```python\n{cheat.source}```", f"Fixed:\n```python\n{softmax.FUSED}```"])
    proposer = LLMProposer(lambda prompt: next(replies))
    result = run_loop(SOFTMAX, proposer, target=0.0, budget=3)
    assert [r.verdict for r in result.history] == ["rejected", "accepted"]
    assert "softmax_reference" in proposer.prompts[0] and rules.LIBRARY_WORK in proposer.prompts[1]


@pytest.mark.parametrize("dist", ["normal", "uniform", "shifted"])
def test_task_baselines_meet_their_own_tolerance(dist):
    for task in TASKS.values():
        for seed, shape in enumerate([task.example, *task.draw_shapes(random.Random(0), "smoke", 3)]):
            inputs = make_inputs(task.specs(shape, dist), seed, "cpu")
            problem = checks.compare(task.baseline(*inputs), task.reference_of(inputs), task.atol, task.rtol)[0]
            assert problem is None, (task.name, shape, problem)


def _sequential_fp32_gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One rounding per product, as tl.dot in "ieee" precision accumulates on a GPU."""
    acc = torch.zeros(a.shape[0], b.shape[1])
    for k in range(a.shape[1]):
        acc.addcmul_(a[:, k, None], b[None, k, :])
    return acc


def test_gemm_tolerance_admits_a_one_product_at_a_time_fp32_sum_and_rejects_tf32():
    task = TASKS["gemm_bias_gelu"]
    k = task.dims["full"]["K"][1]
    gen = torch.Generator().manual_seed(1)
    a, b = (torch.rand(shape, generator=gen, dtype=torch.float64) * 4 - 2 for shape in [(64, k), (k, 64)])
    ref = a @ b
    assert checks.compare(_sequential_fp32_gemm(a.float(), b.float()), ref, task.atol, task.rtol)[0] is None

    def tf32(x):  # round to tf32's 10 mantissa bits, as tensor cores read fp32 operands by default
        return ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)

    problem, _ = checks.compare(tf32(a.float()) @ tf32(b.float()), ref, task.atol, task.rtol)
    assert problem is not None and problem.startswith(checks.LOW_PRECISION)


NCU_CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "softmax_kernel" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","softmax_kernel","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","86.41"
"0","4242","python3.12","127.0.0.1","softmax_kernel","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","1,234,560"
"0","4242","python3.12","127.0.0.1","softmax_kernel","1","7","(128, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","23.10"
==PROF== Disconnected from process 4242
'''


def test_ncu_csv_is_parsed_and_bad_output_named():
    from snippets.kernel_agent import profile

    assert profile.parse(NCU_CSV) == {"softmax_kernel": {"dram_pct": 86.41, "time_ns": 1234560.0, "sm_pct": 23.1}}
    with pytest.raises(profile.ProfileError, match="no metrics table"):
        profile.parse("==PROF== ERROR: ERR_NVGPUCTRPERM - no permission to access GPU performance counters")
    with pytest.raises(profile.ProfileError, match="not a number"):
        profile.parse(NCU_CSV.replace('"86.41"', '"n/a"'))
    cmd = profile.command()
    assert cmd[0] == "ncu" and "--csv" in cmd and cmd[-1] == sys.executable


def test_loop_feedback_carries_ncu_metrics_or_says_why_not():
    from snippets.kernel_agent import profile
    from snippets.kernel_agent.loop import add_profile

    report = Report("softmax", "round 1", verdict="accepted")
    add_profile(report, SOFTMAX, softmax.FUSED, device="cpu")
    assert report.profile == {} and report.profile_note == "ncu: not run (ncu needs a GPU)"
    assert "ncu: not run" in report.summary()
    report = Report("softmax", "round 1", verdict="accepted", profile=profile.parse(NCU_CSV))
    assert "ncu, softmax_kernel: dram_pct 86.41, time_ns 1.235e+06, sm_pct 23.1" in report.summary()
