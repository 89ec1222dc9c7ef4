"""Re-recording within a budget (kb/rerecord.py): what runs, in which order, what is skipped, when it stops."""
import sys
import textwrap
import time
from pathlib import Path

from kb import gpu_run, rerecord
from kb.freshness import lab_states, state_of
from kb.rerecord import Step

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_plan_takes_only_what_is_not_fresh_most_quoted_first():
    states = lab_states()
    names = {"notebooks/02-kernel-fusion.ipynb", "notebooks/05-warp-specialized-gemm.ipynb",
             "notebooks/06-moe-rl.ipynb", "notebooks/01-nccl-timeout-lab.ipynb", "notebooks/00-gpu-ceilings.ipynb"}
    for s in states:
        if s.notebook in ("notebooks/02-kernel-fusion.ipynb", "notebooks/05-warp-specialized-gemm.ipynb"):
            s.state = "stale"
    steps = rerecord.plan([s for s in states if s.notebook in names],
                          {"notebooks/05-warp-specialized-gemm.ipynb": 9, "notebooks/02-kernel-fusion.ipynb": 3,
                           "notebooks/06-moe-rl.ipynb": 40, "notebooks/01-nccl-timeout-lab.ipynb": 2},
                          gpu_count=1, capability="9.0")
    assert [Path(s.notebook).stem for s in steps] == ["06-moe-rl", "05-warp-specialized-gemm", "02-kernel-fusion",
                                                      "01-nccl-timeout-lab"]
    by = {Path(s.notebook).stem: s for s in steps}
    assert "needs 2 GPU(s)" in by["01-nccl-timeout-lab"].skip
    # lab 06 needs one GPU, but its result was recorded on two: a one-GPU run would lose its two-GPU numbers
    assert "recorded on 2 GPUs" in by["06-moe-rl"].skip
    assert by["05-warp-specialized-gemm"].skip is None and by["02-kernel-fusion"].skip is None
    assert by["02-kernel-fusion"].expect_s == state_of("notebooks/02-kernel-fusion.ipynb").result.data["seconds"]
    two = rerecord.plan([s for s in states if s.notebook == "notebooks/06-moe-rl.ipynb"], {}, 2, "9.0")
    assert two[0].skip is None


def test_a_missing_result_is_expected_to_take_the_limit():
    s = state_of("notebooks/00-gpu-ceilings.ipynb")
    s.state, s.result = "missing", None
    assert rerecord.plan([s], {}, 1, "9.0")[0].expect_s == rerecord.MAX_LAB_S


def test_run_stops_before_the_budget_and_leaves_the_rest_for_the_next_run():
    clock, ran, said = Clock(), [], []

    def launch(cmd, timeout):
        ran.append((Path(cmd[3]).stem, timeout))
        clock.now += {"a": 100, "b": 200, "c": 50}[Path(cmd[3]).stem]
        return 0

    steps = [Step("notebooks/a.ipynb", "stale", 100), Step("notebooks/x.ipynb", "stale", 10, skip="needs 2 GPU(s)"),
             Step("notebooks/b.ipynb", "stale", 300), Step("notebooks/c.ipynb", "missing", 40)]
    assert rerecord.run(steps, 400, ["--out", "results"], launch, clock, said.append) == 0
    assert [name for name, _ in ran] == ["a", "c"], "b does not fit in the 300 s left after a"
    assert ran[0][1] == 400 - rerecord.GRACE_S and ran[1][1] == 300 - rerecord.GRACE_S
    assert any("skipping x" in s and "needs 2 GPU(s)" in s for s in said)
    assert any("b (stale) takes about 300 s" in s and "left for the next run" in s for s in said)
    assert "recorded a, c" in said[-1] and "left for another run x, b" in said[-1]


def test_a_failure_or_a_stop_at_the_budget_fails_the_run_but_not_the_others():
    clock, said = Clock(), []
    codes = iter([1, None, 0])
    steps = [Step(f"notebooks/{n}.ipynb", "stale", 10) for n in "abc"]
    assert rerecord.run(steps, 100, [], lambda cmd, t: next(codes), clock, said.append) == 1
    assert any("a failed (exit status 1)" in s for s in said) and any("b was stopped at the budget" in s for s in said)
    assert "recorded c" in said[-1]


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan stays a zombie until init reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_launch_stops_the_whole_tree_at_the_timeout(tmp_path):
    """A child that starts a grandchild in a session of its own (as a notebook's kernel is) and both sleep:
    launch returns at the timeout, and neither is left running."""
    pidfile = tmp_path / "grandchild.pid"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        open({str(pidfile)!r}, "w").write(str(g.pid))
        time.sleep(120)
    """))
    start = time.monotonic()
    assert rerecord.launch([sys.executable, str(script)], timeout=1) is None
    assert time.monotonic() - start < 1 + rerecord.GRACE_S + 5
    grandchild = int(pidfile.read_text())
    time.sleep(0.2)
    assert not _running(grandchild)
    assert rerecord.launch([sys.executable, "-c", "raise SystemExit(3)"], timeout=30) == 3


def test_gpu_run_refuses_a_budget_without_stale_and_stale_with_smoke(capsys):
    assert gpu_run.main(["--budget-s", "100"]) == 2
    assert gpu_run.main(["--stale", "--mode", "smoke"]) == 2
    assert "--stale re-records full results only" in capsys.readouterr().err


def test_stale_mode_on_a_cpu_runs_only_what_is_not_fresh(monkeypatch, tmp_path, capsys):
    import snippets.common.env as env

    monkeypatch.setattr(env, "environment", lambda: {"name": "NVIDIA H200", "cuda": "13.0", "count": 1,
                                                     "capability": "9.0"})
    called = {}

    def fake_main(notebooks, budget_s, gpu, count, capability, child):
        called.update(notebooks=notebooks, budget_s=budget_s, gpu=gpu, count=count, child=child)
        return 0

    monkeypatch.setattr(rerecord, "main", fake_main)
    assert gpu_run.main(["--stale", "--budget-s", "900", "--out", str(tmp_path)]) == 0
    assert called == {"notebooks": [], "budget_s": 900.0, "gpu": "nvidia-h200", "count": 1,
                      "child": ["--out", str(tmp_path)]}
    assert gpu_run.main(["--stale"]) == 0 and called["budget_s"] == rerecord.DEFAULT_BUDGET_S


def test_a_sigterm_while_a_result_is_written_waits_for_both_files(tmp_path):
    """The executed notebook and its JSON are written as a pair: SIGTERM inside the block arrives after it."""
    script = tmp_path / "w.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from kb.gpu_run import sigterm_deferred
        with sigterm_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            open({str(tmp_path / "a")!r}, "w").write("1")
            open({str(tmp_path / "b")!r}, "w").write("2")
        open({str(tmp_path / "after")!r}, "w").write("3")
    """))
    p = __import__("subprocess").run([sys.executable, str(script)], timeout=60)
    assert p.returncode == -15 and (tmp_path / "a").exists() and (tmp_path / "b").exists()
    assert not (tmp_path / "after").exists()
