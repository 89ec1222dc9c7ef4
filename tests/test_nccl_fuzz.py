"""Property-based fuzzing of every parser the NCCL doctor has: the log scanner, the Flight Recorder pickle
and JSON readers, nccl_info and topo. For any input the doctor gives a diagnosis (exit 0) or one line
naming the file (exit 2), within a time bound; never a traceback, never a hang."""
import contextlib
import io
import json
import pickle
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snippets.nccl import doctor, nccl_info, topo

FUZZ = settings(max_examples=150, deadline=3000, suppress_health_check=[HealthCheck.too_slow], database=None)
FRAGMENTS = [  # pieces of the lines the parsers look for, so that examples reach past the first regex
    "[rank1]:", "[PG ID 0 PG GUID 0(default_pg) Rank 1] ", "failure detected by watchdog at work sequence id: 4 ",
    "PG status: last enqueued work: 4, last completed work: 3", "WorkNCCL(SeqNum=", "4, OpType=ALLREDUCE",
    ", Timeout(ms)=8000) ran for 8063 milliseconds before timing out", "Received a dump signal due to a collective "
    "timeout from  rank 0", " Last enqueued NCCL work: 4, last completed NCCL work: 4.", "Detected mismatch between "
    "collectives on ranks. Rank 0 is running collective: ", "CollectiveFingerPrint(SequenceNumber=3, OpType=BARRIER, "
    "TensorShape=[1], TensorDtypes=Float, ", "but Rank 1 is running collective: ", "Rank 1 failed to pass "
    "monitoredBarrier", "Timed out waiting 3000ms for recv operation to complete", "ValueError", "NCCL WARN ",
    "vm:604:604 [1] NCCL INFO ", "AllReduce: opCount 0 sendbuff 0x7f recvbuff 0x7f count 1024 datatype 7 op 0 root 0 "
    "comm 0x17c75de0 [nranks=2] stream (nil)", "ncclCommInitRankConfig comm 0x17c75de0 rank 1 nranks 2 cudaDev 1 "
    "nvmlDev 1 busId 70 commId 0xde47b7b0d25a6996 - Init START", "Channel 00/24 : 0 1", "Channel 00/0 : 0[0] -> "
    "1[1] via P2P/CUMEM/read", "24 coll channels, 0 collnet channels, 16 nvls channels", "=== System : maxBw 40.0 ===",
    "Trees [0] 1/-1/-1->0->-1", "Using network IB", "NCCL version 2.28.9+cuda13.0", "rank 0 exitcode 1 after 3.2 s",
    "GPU0\tGPU1\tCPU Affinity\tNUMA Affinity", "GPU0\t X \tNV18\t0-47\t0", "  NV#  = Connection traversing", "\t",
    " ", "\n", "\r", "\x0c", "9" * 30, "(", ")", "[", "]", ":",
]
TEXTISH = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=60).map("".join)
ANY_BYTES = st.binary(max_size=4000) | TEXTISH.map(lambda s: s.encode("utf-8", "surrogatepass"))


def run(paths: list[Path]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = doctor.main([str(p) for p in paths] + ["--no-pytorch"])
    return rc, out.getvalue(), err.getvalue()


def check(rc: int, out: str, err: str, names: list[str]) -> None:
    assert rc in (0, 2), (rc, err)
    if rc == 2:
        assert err.startswith("doctor: ") and len(err.strip().splitlines()) == 1, err
        assert any(n in err for n in names), err
    else:
        assert out.strip() and not err, err


@FUZZ
@given(data=ANY_BYTES, name=st.sampled_from(["rank0.log", "nccl.0.log", "launcher.log", "topo.txt", "job.txt"]))
def test_any_bytes_as_a_log(data, name):
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / name
        p.write_bytes(data)
        check(*run([p]), [name])
        if name != "job.txt":  # a folder holding it, next to a rank log that is fine
            (Path(tmp) / "rank1.log").write_text("[rank1]: failure detected by watchdog at work sequence id: 4 PG "
                                                 "status: last enqueued work: 4, last completed work: 3\n")
            check(*run([Path(tmp)]), [name, tmp])


SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
PLAIN = st.recursive(SCALARS | st.binary(max_size=8),
                     lambda c: st.lists(c, max_size=5) | st.tuples(c, c) | st.dictionaries(st.text(max_size=8), c,
                                                                                             max_size=5),
                     max_leaves=30)
JSONISH = st.recursive(SCALARS, lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(max_size=8), c,
                                                                                    max_size=5), max_leaves=30)


def entries(values):
    keys = ["collective_seq_id", "profiling_name", "process_group", "state", "input_sizes", "input_dtypes",
            "time_created_ns", "duration_ms", "timeout_ms", "frames", "is_p2p", "pg_id"]
    good = {"collective_seq_id": st.integers(0, 6), "profiling_name": st.sampled_from(["nccl:all_reduce", "gloo:"
                                                                                      "barrier", "x"]),
            "process_group": st.just(["0", "default_pg"]), "state": st.sampled_from(["completed", "started"]),
            "time_created_ns": st.integers(0, 10**19)}
    return st.lists(st.fixed_dictionaries({}, optional={k: (good.get(k, values) | values) for k in keys}), max_size=6)


def dumps(values):
    return (values | st.fixed_dictionaries(
        {"version": st.just("2.10") | values, "entries": entries(values) | values},
        optional={"pg_config": st.just({"0": {"ranks": "[0, 1]"}}) | values, "pg_status": values,
                  "comm_lib_version": st.just("2.28.9") | values}))


@FUZZ
@given(raw=dumps(PLAIN), protocol=st.integers(2, 5), second=st.booleans())
def test_any_pickle_of_plain_data_as_a_dump(raw, protocol, second):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "fr.0").write_bytes(pickle.dumps(raw, protocol=protocol))
        if second:
            (Path(tmp) / "fr.1").write_bytes(pickle.dumps(raw, protocol=protocol))
        check(*run([Path(tmp)]), ["fr.0", "fr.1"])


@FUZZ
@given(raw=dumps(JSONISH), second=st.booleans())
def test_any_json_as_a_dump(raw, second):
    with tempfile.TemporaryDirectory() as tmp:
        text = json.dumps(raw)
        (Path(tmp) / "fr.0.json").write_text(text)
        if second:
            (Path(tmp) / "fr.1.json").write_text(text)
        check(*run([Path(tmp)]), ["fr.0.json", "fr.1.json"])


@FUZZ
@given(text=TEXTISH)
def test_nccl_info_and_topo_parse_any_text(text):
    info = nccl_info.parse(text)
    for lang in ("en", "zh"):
        assert isinstance(info.summary(lang), str)
    if topo.is_topo(text):
        try:
            m = topo.parse(text)
        except ValueError as e:
            assert "nvidia-smi topo -m" in str(e)
        else:
            assert isinstance(m.render("zh"), str)
