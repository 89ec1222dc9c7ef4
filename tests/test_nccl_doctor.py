"""The doctor names the culprit of every fault scenario (gloo, run here) and of the real NCCL probe
fixtures, and turns bad input into a one-line message with exit code 2."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snippets.nccl import doctor, flight_recorder
from snippets.nccl.launch import Job
from snippets.nccl.scenarios import SCENARIOS


ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "nccl"
GLOO = [name for name, s in SCENARIOS.items() if "gloo" in s.backends]
TIMEOUT_S = 3.0
PARALLEL = 3  # jobs at once: 6 processes on a 2-core runner keep the ranks of a job in step


@pytest.fixture(scope="module")
def gloo_jobs(tmp_path_factory):
    """One run of every scenario on gloo with 2 ranks, shared by the tests below."""
    root = tmp_path_factory.mktemp("nccl-jobs")
    results, running = {}, []
    for name in GLOO:
        if len(running) == PARALLEL:
            job = running.pop(0)
            results[job.scenario] = job.wait()
        running.append(Job(name, "gloo", 2, root / name, timeout_s=TIMEOUT_S))
    for job in running:
        results[job.scenario] = job.wait()
    return results


def diagnosis_of(path) -> doctor.Diagnosis:
    (diag,) = doctor.diagnose_paths([str(path)])
    return diag


@pytest.mark.parametrize("name", GLOO)
def test_doctor_names_culprit_collective_and_seq_on_gloo(gloo_jobs, name):
    job, want = gloo_jobs[name], SCENARIOS[name].expected
    assert not job.killed, f"{name}: the launcher had to kill ranks {job.killed}"
    diag = diagnosis_of(job.job_dir)
    got = (diag.cls, tuple(diag.culprits), diag.op, diag.seq)
    assert got == (want.cls, want.culprits, want.op, want.seq), doctor.render(diag)


def test_launcher_writes_one_exit_line_per_rank(gloo_jobs):
    job = gloo_jobs["dead_rank"]
    lines = (job.job_dir / "launcher.log").read_text().splitlines()
    assert lines[1].startswith("rank 0 exitcode 1 after ") and lines[2].startswith("rank 1 exitcode -9 after ")
    assert '"op": "all_reduce", "seq": 4' in (job.job_dir / "rank0.log").read_text()


def test_gloo_abort_without_detail_is_a_mismatch_with_no_culprit(gloo_jobs):
    job = gloo_jobs["shape_mismatch_abort"]
    assert job.exitcodes[0] == -6  # SIGABRT: gloo::EnforceNotMet is not catchable
    text = doctor.render(diagnosis_of(job.job_dir))
    assert "Received data size doesn't match expected size" in text and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in text


def test_report_quotes_evidence_with_file_and_line(gloo_jobs):
    diag = diagnosis_of(gloo_jobs["swallowed_exception"].job_dir)
    assert any("rank1.log:" in q and "ValueError('corrupt sample in batch 1')" in q for q in diag.evidence)
    assert any("Timed out waiting 3000ms" in q for q in diag.evidence)
    assert "missing ranks: {1}" in diag.notes[0]  # PyTorch's analyser, once pg_config is re-keyed
    assert "缺席" in doctor.render(diag, "zh")


PROBE = {  # real NCCL 2.28.9 dumps from two H200s; collective #4 is the fault
    "skip": ("missing_rank", [1], "all_reduce", 4),
    "mismatch_op": ("mismatch", [1], "all_reduce", 4),
    "shape": ("mismatch", [1], "all_reduce", 4),
}


@pytest.mark.parametrize("name", PROBE)
def test_doctor_on_real_nccl_dumps(name):
    diag = diagnosis_of(FIXTURES / "probe" / name)
    assert (diag.cls, diag.culprits, diag.op, diag.seq) == PROBE[name], doctor.render(diag)
    assert diag.ranks[0]["last_completed"] == (4 if name == "shape" else 3)  # NCCL marks completion; gloo cannot
    assert any("NCCL 2.28.9" in e for e in diag.environment)
    dumps = [flight_recorder.load_dump(FIXTURES / "probe" / name / f"fr.{r}") for r in (0, 1)]
    rep = flight_recorder.pytorch_report(dumps)  # PyTorch's own analyser agrees
    assert rep.seq == 4 and (rep.missing_ranks or rep.culprits) == [1]


def test_probe_skip_quotes_the_caller_and_counts_nccl_coll_lines():
    text = doctor.render(diagnosis_of(FIXTURES / "probe" / "skip"))
    assert "called from worker (probe_nccl.py:24)" in text
    assert "nccl.1.log:254: NCCL COLL line 3 of rank 1" in text


def test_watchdog_lines_alone_give_seq_and_op(tmp_path):
    # Two lines the probe's parent process printed on stderr (rank 1 of the 'shape' run), and
    # rank 0's dump-signal line; then the same with rank 0 one collective behind.
    lines = [
        "[rank1]:[E1130 02:50:28.806724160 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 1]  "
        "failure detected by watchdog at work sequence id: 4 PG status: last enqueued work: 4, last completed work: 3",
        "[rank1]:[E1130 02:51:32.258804753 ProcessGroupNCCL.cpp:2119] [PG ID 0 PG GUID 0(default_pg) Rank 1] Process "
        "group watchdog thread terminated with exception: [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=2048, NumelOut=2048, Timeout(ms)=8000) ran for 8063 "
        "milliseconds before timing out.",
        "[rank0]:[E1130 02:50:33.198028757 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 0] Received "
        "a dump signal due to a collective timeout from  rank 1 and we will try our best to dump the debug info. Last "
        "enqueued NCCL work: 4, last completed NCCL work: 4.",
    ]
    (tmp_path / "stderr.txt").write_text("\n".join(lines) + "\n")
    diag = diagnosis_of(tmp_path / "stderr.txt")
    assert (diag.cls, diag.op, diag.seq) == ("none", "all_reduce", 4)
    assert "ranks [1] did not complete it" in doctor.render(diag)
    (tmp_path / "stderr.txt").write_text("\n".join(lines).replace("NCCL work: 4, last", "NCCL work: 3, last") + "\n")
    diag = diagnosis_of(tmp_path / "stderr.txt")
    assert (diag.cls, diag.culprits, diag.op, diag.seq) == ("missing_rank", [0], "all_reduce", 4)


def test_nccl_warn_about_the_network(tmp_path):
    # The WARN line's format is NCCL's (NVIDIA/nccl#1405), host and addresses made up.
    (tmp_path / "nccl.3.log").write_text(
        "node-b:3468:3468 [3] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
        "node-b:3468:3905 [3] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<54862> with "
        "status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.8 remoteGids::ffff:10.0.0.7\n"
        "node-b:3468:3905 [3] NCCL INFO transport/net.cc:1302 -> 6\n")
    (tmp_path / "rank3.log").write_text(
        "[rank3]:[E1130 02:51:32.258804753 ProcessGroupNCCL.cpp:2119] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLGATHER, NumelIn=4096, "
        "NumelOut=32768, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n")
    diag = diagnosis_of(tmp_path)
    assert (diag.cls, diag.culprits, diag.op, diag.seq) == ("network_error", [3], "all_gather", 812)
    assert "nccl.3.log:2: node-b:3468:3905 [3] ib_plugin.c:1615 NCCL WARN NET/IB" in doctor.render(diag)


def test_synthetic_dumps_of_many_ranks(tmp_path):
    from snippets.nccl import synthetic

    for kind, cls in (("missing", "missing_rank"), ("straggler", "straggler"), ("mismatch", "mismatch")):
        synthetic.make_job(tmp_path / kind, 64, 37, kind, 12, seed=3)
        diag = diagnosis_of(tmp_path / kind)
        assert (diag.cls, diag.culprits, diag.seq) == (cls, [37], 12), doctor.render(diag)


BAD = {
    "truncated_pickle": "fr.0: truncated or corrupt pickle",
    "truncated_json": "fr.1.json: truncated or corrupt JSON",
    "not_a_dump": "fr.0.json: not a Flight Recorder dump",
    "mixed_jobs": "fr.2.json: from another job: world of 4 ranks, but fr.0 has 2",
    "other_program.log": "other_program.log: not a log of a distributed PyTorch job",
}


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_named(name, capsys):
    assert doctor.main([str(FIXTURES / "bad" / name)]) == 2
    err = capsys.readouterr().err
    assert BAD[name] in err and len(err.strip().splitlines()) == 1, err


def test_empty_folder_and_mixed_backends(tmp_path, capsys, gloo_jobs):
    (tmp_path / "empty").mkdir()
    assert doctor.main([str(tmp_path / "empty")]) == 2
    assert "empty: empty folder" in capsys.readouterr().err
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(FIXTURES / "probe" / "skip" / "fr.0", mixed / "fr.0")
    shutil.copy(gloo_jobs["skip_collective"].job_dir / "fr.1.json", mixed / "fr.1.json")
    assert doctor.main([str(mixed)]) == 2
    assert "fr.1.json: from another job: communication library version ''" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["truncated_pickle", "other_program.log"])
def test_cli_prints_no_traceback(name):
    r = subprocess.run([sys.executable, "-m", "snippets.nccl.doctor", str(FIXTURES / "bad" / name)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.startswith("doctor: "), r.stderr


def test_cli_json_output():
    r = subprocess.run([sys.executable, "-m", "snippets.nccl.doctor", str(FIXTURES / "probe" / "skip"), "--json",
                        "--lang", "zh"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (d,) = json.loads(r.stdout)
    assert (d["cls"], d["culprits"], d["op"], d["seq"]) == ("missing_rank", [1], "all_reduce", 4)
    assert "没有调用 all_reduce #4" in d["next_steps"][0]


def test_launcher_retries_when_the_port_is_taken(tmp_path, monkeypatch):
    import socket

    from snippets.nccl import launch

    held = socket.socket()
    held.bind(("127.0.0.1", 0))  # bound, not listening: rank 0's store cannot bind it
    ports = iter([held.getsockname()[1]])
    real = launch.free_port
    monkeypatch.setattr(launch, "free_port", lambda: next(ports, None) or real())
    try:
        result = launch.run_job("healthy", "gloo", 2, tmp_path / "job", timeout_s=3.0)
    finally:
        held.close()
    assert result.ok, (tmp_path / "job" / "rank0.log").read_text()[-2000:]
    assert not launch.port_was_taken(tmp_path / "job")


REAL = Path(__file__).parent / "fixtures" / "nccl" / "h200x2"  # evidence of the lab's NCCL run on two H200s
REAL_EXTRA = {  # debug variants of skip_collective the notebook also ran
    "skip_collective-detail": ("missing_rank", (1,), None, 4),  # DETAIL's monitored barrier: the op never ran
    "skip_collective-nccl_coll": ("missing_rank", (1,), "all_reduce", 4),
    "init-healthy": ("none", (), None, None),
}


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.iterdir() if p.is_dir()))
def test_doctor_on_real_nccl_evidence(name):
    want = REAL_EXTRA.get(name) or tuple(SCENARIOS[name].expected.__dict__.values())
    diag = doctor.diagnose_paths([str(REAL / name)], "en")[0]
    assert (diag.cls, tuple(diag.culprits), diag.op, diag.seq) == want, doctor.render(diag)
