"""snippets/kernel_agent on the CPU (Triton's interpreter): every shipped cheat is rejected with the reason
that names it, every honest candidate is accepted, crashing, hanging and memory-hogging candidates end their
worker and not the harness; the static checks, the comparison, fast_p and the loop on their own."""
import random

import pytest
import torch

from snippets.kernel_agent import checks, static
from snippets.kernel_agent.candidates import CHEATS, CUDA, FAULTS, HONEST, softmax
from snippets.kernel_agent.harness import DEVICE, Report, Settings, evaluate, evaluate_many, fast_p
from snippets.kernel_agent.loop import LLMProposer, ScriptedProposer, run_loop
from snippets.kernel_agent.sandbox import Limits
from snippets.kernel_agent.spec import TASKS


SOFTMAX = TASKS["softmax"]


@pytest.fixture(scope="module")
def honest_reports():
    return evaluate_many([(TASKS[t], n, s) for t, n, s in HONEST + CUDA], workers=2)


@pytest.mark.parametrize("cheat", CHEATS, ids=[c.name for c in CHEATS])
def test_every_cheat_is_rejected_with_the_reason_that_names_it(cheat):
    report = evaluate(SOFTMAX, cheat.source, cheat.name)
    assert report.verdict == "rejected", report.summary()
    assert report.reason.startswith(cheat.reason), f"{cheat.name}: expected '{cheat.reason}', got {report.reason}"


def test_the_suite_covers_ten_exploits_with_distinct_reasons():
    assert len(CHEATS) >= 10
    assert len({c.reason for c in CHEATS}) == len(CHEATS)


@pytest.mark.parametrize("i", range(len(HONEST + CUDA)), ids=[n for _, n, _ in HONEST + CUDA])
def test_every_honest_candidate_is_accepted(honest_reports, i):
    report = honest_reports[i]
    if report.name in {n for _, n, _ in CUDA} and DEVICE == "cpu":
        assert report.verdict == "skipped" and "needs CUDA" in report.reason  # load_inline builds for a GPU
        return
    assert report.verdict == "accepted", report.summary()
    assert report.trials == 1 + 3 * 2 and report.speedup > 0 and report.max_error is None


def test_faults_end_the_worker_not_the_harness():
    """Crash (illegal address), hang and memory hog run side by side; each is reported with its verdict
    within its limit, and the harness evaluates an honest candidate afterwards."""
    settings = Settings(limits=Limits(call_s=6, memory_gb=1))  # room for the hog on a loaded 2-core machine
    jobs = [(SOFTMAX, name, src) for name, (src, _) in FAULTS.items()]
    reports = evaluate_many(jobs, workers=3, settings=settings)
    for report, (name, (_, verdict)) in zip(reports, FAULTS.items()):
        assert report.verdict == verdict, report.summary()
        assert report.reason.startswith(verdict.replace("timeout", "timed out")), report.reason
        assert report.seconds < 6 + 6, f"{name}: {report.seconds:.1f} s"
    assert "SIGSEGV" in reports[0].reason
    assert evaluate(SOFTMAX, softmax.FUSED, settings=settings).correct


@pytest.mark.parametrize("body, reason", [
    ("from snippets.kernel_agent.spec import softmax_reference", static.CALLS_REFERENCE),
    ("def kernel(x, out):\n    out.copy_(reference(x))", static.CALLS_REFERENCE),
    ("def kernel(x, out):\n    try:\n        pass\n    except Exception:\n        pass", static.TRY_FALLBACK),
    ("import contextlib\ndef kernel(x, out):\n    with contextlib.suppress(Exception):\n        pass",
     static.TRY_FALLBACK),
    ("def kernel(x, out):\n    out.copy_(torch.softmax(x, -1))", static.TORCH_OP),
    ("def kernel(x, out):\n    out.copy_(x.exp() / x.exp().sum(-1, keepdim=True))", static.TORCH_OP),
    ("def kernel(a, b, out):\n    out.copy_(a @ b)", static.TORCH_OP),
    ("from torch.nn import functional as G\ndef kernel(x, out):\n    out.copy_(G.dropout(x))", static.TORCH_OP),
    ("def kernel(x, out):\n    out.copy_(torch.ops.aten.mm(x, x))", static.TORCH_OP),
    ("import ctypes", static.FORBIDDEN_IMPORT),
    ("from os import environ", static.FORBIDDEN_IMPORT),
    ("def kernel(x, out):\n    eval('1')", static.DYNAMIC_CODE),
    ("def kernel(x, out):\n    kernel.__globals__['x'] = 1", static.DYNAMIC_CODE),
    ("torch.allclose = None", static.PATCHES),
    ("triton.testing.do_bench = None", static.PATCHES),
    ("def launch(x, out):\n    pass", static.NO_ENTRY),
    ("def kernel(x, out):\n    pass", static.NO_KERNEL),
    ("def kernel(x, out:\n", static.SYNTAX),
])
def test_static_check_names_the_rule(body, reason):
    found = static.check_source(softmax.HEADER + body, SOFTMAX)
    assert any(f.startswith(reason) for f in found), found


@pytest.mark.parametrize("source", [s for _, _, s in HONEST + CUDA], ids=[n for _, n, _ in HONEST + CUDA])
def test_static_checks_pass_honest_sources(source):
    assert static.check_source(source, SOFTMAX) == []


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
    assert static.TRY_FALLBACK in proposer.seen[0].text()  # the proposer read why round 1 failed


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
    assert "softmax_reference" in proposer.prompts[0] and static.TORCH_OP in proposer.prompts[1]


def test_task_baselines_meet_their_own_tolerance():
    gen = torch.Generator().manual_seed(0)
    for task in TASKS.values():
        for shape in [task.example, *task.draw_shapes(random.Random(0), "smoke", 3)]:
            inputs = task.make_inputs(shape, gen, "shifted")
            ref = task.reference(*(t.double() for t in inputs))
            assert checks.compare(task.baseline(*inputs), ref, task.atol, task.rtol)[0] is None, (task.name, shape)


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
    cmd = profile.command("softmax", "/tmp/c.py")
    assert cmd[0] == "ncu" and "--csv" in cmd and cmd[-3:] == ["snippets.kernel_agent.profile", "softmax", "/tmp/c.py"]


def test_loop_feedback_carries_ncu_metrics_or_says_why_not():
    from snippets.kernel_agent import profile
    from snippets.kernel_agent.loop import add_profile

    report = Report("softmax", "round 1", verdict="accepted")
    add_profile(report, SOFTMAX, softmax.FUSED, device="cpu")
    assert report.profile == {} and report.profile_note == "ncu: not run (ncu needs a GPU)"
    assert "ncu: not run" in report.summary()
    report = Report("softmax", "round 1", verdict="accepted", profile=profile.parse(NCU_CSV))
    assert "ncu, softmax_kernel: dram_pct 86.41, time_ns 1.235e+06, sm_pct 23.1" in report.summary()
