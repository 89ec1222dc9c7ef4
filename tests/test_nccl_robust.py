"""The doctor on whatever a job left behind: input that once made it run without end, blow up memory,
print a traceback or name the wrong culprit. Each case runs the command line in a subprocess with a
time limit (and a memory limit), so a regression fails the test instead of hanging the suite."""
import json
import pickle
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snippets.nccl import doctor

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "nccl"
PROBE = FIXTURES / "probe"
MEMORY_LIMIT = 1 << 30  # bytes of data segment a doctor run may take (it needs about 150 MB)


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_LIMIT, MEMORY_LIMIT))


def cli(*args, timeout=60):
    """Run the doctor; a run past `timeout` seconds fails the test."""
    try:
        return subprocess.run([sys.executable, "-m", "snippets.nccl.doctor", *map(str, args)], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout, preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail(f"doctor {' '.join(map(str, args))} ran past {timeout} s")


def assert_clean_error(r, *names):
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stderr.startswith("doctor: "), r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    for name in names:
        assert name in r.stderr, r.stderr


def raw_dump(path) -> dict:
    from snippets.nccl import flight_recorder

    return flight_recorder.read_raw(Path(path))


def write_json_dump(path, raw):
    raw = json.loads(json.dumps(raw))  # tuples to lists
    Path(path).write_text(json.dumps(raw))


# --- runs without end, or blows up --------------------------------------------------------------------------

def test_a_huge_sequence_number_does_not_walk_every_number(tmp_path):
    for r in (0, 1):
        raw = raw_dump(PROBE / "skip" / f"fr.{r}")
        if r == 0:
            raw["entries"][-1]["collective_seq_id"] = 10**12
        write_json_dump(tmp_path / f"fr.{r}.json", raw)
    r = cli(tmp_path, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "1000000000000" in r.stdout


def shared_lists(depth: int):
    a = []
    for _ in range(depth):
        a = [a, a]  # pickle stores each list once; walked as a tree it has 2**depth leaves
    return a


def test_a_small_pickle_of_shared_lists_is_refused_before_it_is_walked(tmp_path):
    raw = raw_dump(PROBE / "skip" / "fr.0")
    raw["entries"][0]["input_sizes"] = shared_lists(60)
    (tmp_path / "fr.0").write_bytes(pickle.dumps(raw, protocol=2))
    shutil.copy(PROBE / "skip" / "fr.1", tmp_path / "fr.1")
    r = cli(tmp_path, timeout=30)
    assert_clean_error(r, "fr.0:")


def test_a_long_line_of_repeated_watchdog_text_is_read_in_linear_time(tmp_path):
    (tmp_path / "rank0.log").write_text("WorkNCCL(SeqNum=1, OpType=X" * 40_000 + "\n")
    r = cli(tmp_path / "rank0.log", "--no-pytorch", timeout=20)
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr[-2000:]


# --- tracebacks ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("data", [b"\x80\x02K\x01K\x02K\x03s.",  # SETITEM on an int: TypeError
                                  b"\x80\x02}K\x01a.",  # APPEND to a dict: AttributeError
                                  b"\x80\x02c__builtin__\neval\n."])  # a global: refused
def test_a_malformed_pickle_is_named(tmp_path, data):
    (tmp_path / "fr.0").write_bytes(data)
    assert_clean_error(cli(tmp_path / "fr.0"), "fr.0: ")


def test_deeply_nested_json_is_named(tmp_path):
    (tmp_path / "fr.0.json").write_text('{"version": "2.10", "entries": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert_clean_error(cli(tmp_path / "fr.0.json"), "fr.0.json: ")


# --- wrong diagnoses ----------------------------------------------------------------------------------------

def test_dumps_of_two_jobs_with_the_same_world_are_a_contradiction_not_a_culprit(tmp_path):
    shutil.copy(PROBE / "skip" / "fr.0", tmp_path / "fr.0")  # the probe's skip run ...
    shutil.copy(PROBE / "shape" / "fr.1", tmp_path / "fr.1")  # ... and its shape run, 152 s later
    r = cli(tmp_path)
    assert_clean_error(r, "fr.1: from another job", "fr.0")


def test_nccl_logs_of_two_jobs_are_a_contradiction(tmp_path):
    shutil.copy(PROBE / "skip" / "nccl.0.log", tmp_path / "nccl.0.log")
    shutil.copy(PROBE / "shape" / "nccl.1.log", tmp_path / "nccl.1.log")
    assert_clean_error(cli(tmp_path, "--no-pytorch"), "nccl.1.log: from another job", "commId")


WATCHDOG_FAILURE = ("[rank1]:[E1130 02:50:28.806724160 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) "
                    "Rank 1]  failure detected by watchdog at work sequence id: 4 PG status: last enqueued work: 4, "
                    "last completed work: 3")
WATCHDOG_TIMEOUT = ("[rank0]:[E1130 02:51:32.258804753 ProcessGroupNCCL.cpp:2119] [PG ID 0 PG GUID 0(default_pg) "
                    "Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, "
                    "NumelIn=2048, NumelOut=2048, Timeout(ms)=8000) ran for 8063 milliseconds before timing out.")
DUMP_SIGNAL = ("[rank1]:[E1130 02:50:33.198028757 ProcessGroupNCCL.cpp:1914] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
               "Received a dump signal due to a collective timeout from  rank 0 and we will try our best to dump the "
               "debug info. Last enqueued NCCL work: 4, last completed NCCL work: 4.")


def test_an_empty_rank_log_is_named_and_the_seq_comes_from_the_other_rank(tmp_path):
    (tmp_path / "rank0.log").write_text("")
    (tmp_path / "rank1.log").write_text(DUMP_SIGNAL + "\n")
    for lang in ("en", "zh"):
        r = cli(tmp_path, "--lang", lang, "--no-pytorch")
        assert r.returncode == 0, r.stderr
        assert "#None" not in r.stdout and "#4" in r.stdout, r.stdout
    (diag,) = doctor.diagnose_paths([str(tmp_path)], pytorch=False)
    assert diag.seq == 4
    text = doctor.render(diag)
    assert "rank0.log: no watchdog line from rank 0" in text and "Every rank" not in text, text


def test_a_rank_without_its_failure_line_counts_by_its_timeout_line(tmp_path):
    (tmp_path / "rank0.log").write_text(WATCHDOG_TIMEOUT + "\n")
    (tmp_path / "rank1.log").write_text(WATCHDOG_FAILURE + "\n")
    (diag,) = doctor.diagnose_paths([str(tmp_path)], pytorch=False)
    assert (diag.cls, diag.op, diag.seq) == ("none", "all_reduce", 4)
    assert diag.facts["progress"] == {0: (4, 3), 1: (4, 3)}
    assert "ranks [0, 1] did not complete it" in doctor.render(diag)


BINARY = bytes(range(256)) * 64


def test_a_binary_file_named_like_a_log_is_not_read_as_one(tmp_path):
    (tmp_path / "rank0.log").write_bytes(BINARY)
    assert_clean_error(cli(tmp_path / "rank0.log", "--no-pytorch"), "rank0.log: ", "not a text")
    assert_clean_error(cli(tmp_path, "--no-pytorch"), "rank0.log: ", "not a text")
    (tmp_path / "rank1.log").write_text(WATCHDOG_FAILURE + "\n")
    for lang, said in (("en", ": not a text log"), ("zh", "：不是文本日志")):
        r = cli(tmp_path, "--no-pytorch", "--lang", lang)
        assert r.returncode == 0, r.stderr
        assert f"rank0.log{said}" in r.stdout, r.stdout
    r = cli(tmp_path, "--no-pytorch")
    assert "rank0.log: no watchdog line from rank 0" in r.stdout, "the rank whose log was unreadable is named"
    assert "Every rank" not in r.stdout, r.stdout


def test_a_barrier_against_an_all_reduce_in_nccl_coll_lines_is_a_mismatch():
    (diag,) = doctor.diagnose_paths([str(FIXTURES / "robust" / "coll_barrier")], pytorch=False)
    assert (diag.cls, diag.culprits, diag.op, diag.seq) == ("mismatch", [1], "all_reduce", 4), doctor.render(diag)
    text = doctor.render(diag)
    assert "count 1024" in text and "count 1 " in text and "nccl.1.log:255" in text, text
    assert "barrier" in text
    assert "barrier" in doctor.render(diag, "zh")


# --- evidence that does not belong together: logs against logs, logs against dumps ---------------------------

SHAPE = FIXTURES / "h200x2" / "shape_mismatch"


def _shape_job(tmp_path) -> Path:
    job = tmp_path / "job"
    shutil.copytree(SHAPE, job)
    return job


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_untouched_job_still_gets_its_diagnosis(tmp_path):
    r = cli(_shape_job(tmp_path), "--json")
    assert r.returncode != 2, r.stderr
    assert json.loads(r.stdout)[0]["cls"] == "mismatch"


def test_a_process_group_under_two_guids_is_another_job(tmp_path):
    job = _shape_job(tmp_path)
    _edit(job / "rank1.log", "PG GUID 0(default_pg)", "PG GUID 7(default_pg)")
    assert_clean_error(cli(job), "from another job: its process group 0 is", "rank0.log")


def test_a_log_that_speaks_for_another_rank_is_named(tmp_path):
    job = _shape_job(tmp_path)
    shutil.copy(job / "rank1.log", job / "rank0.log")
    assert_clean_error(cli(job), "rank0.log: named as rank 0's log, but its lines speak for rank 1")


def test_a_dump_older_than_its_rank_log_is_from_another_run(tmp_path):
    job = _shape_job(tmp_path)
    (job / "fr.0").unlink()  # keep the JSON dump of rank 0, and make it say less was enqueued than its log did
    raw = json.loads((job / "fr.0.json").read_text())
    raw["pg_status"]["0"]["last_enqueued_collective"] = 2
    (job / "fr.0.json").write_text(json.dumps(raw))
    assert_clean_error(cli(job), "fr.0.json: says process group 0 enqueued up to #2", "rank0.log", "#4")


def test_a_dump_whose_collective_is_not_the_one_its_log_timed_out_on(tmp_path):
    job = _shape_job(tmp_path)
    (job / "fr.1").unlink()
    raw = raw_dump(SHAPE / "fr.1")
    for e in raw["entries"]:
        if e["collective_seq_id"] == 4:
            e["profiling_name"] = "nccl:broadcast"
    write_json_dump(job / "fr.1.json", raw)
    assert_clean_error(cli(job), "fr.1.json: has broadcast as collective #4 of process group 0",
                       "rank1.log timed out on ALLREDUCE #4")


def test_one_log_written_by_two_processes_is_two_runs(tmp_path):
    src = FIXTURES / "h200x2" / "skip_collective-nccl_coll"
    job = tmp_path / "job"
    shutil.copytree(src, job)
    text = (job / "nccl.1.log").read_text()
    pid = text.split(":", 2)[1]
    (job / "nccl.1.log").write_text(text + text.replace(f":{pid}:", ":99999:"))
    assert_clean_error(cli(job, "--no-pytorch"), "nccl.1.log: written by several processes", ":99999")


def test_one_process_cannot_be_two_ranks(tmp_path):
    src = FIXTURES / "h200x2" / "skip_collective-nccl_coll"
    job = tmp_path / "job"
    shutil.copytree(src, job)
    shutil.copy(job / "nccl.0.log", job / "nccl.1.log")
    r = cli(job, "--no-pytorch")
    assert r.returncode == 2 and ("process" in r.stderr or "commId" in r.stderr), r.stderr
    assert "wrote it and also" in r.stderr, r.stderr
