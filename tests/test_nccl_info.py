"""NCCL INFO logs and `nvidia-smi topo -m` from a real H200 x2 machine, other log formats, synthetic FR dumps."""
import json
from pathlib import Path

import pytest

from snippets.nccl import nccl_info, synthetic, topo

FIX = Path(__file__).parent / "fixtures" / "nccl" / "info"


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_real_log_rank0():
    info = nccl_info.parse(read("skip_nccl.0.log"))
    assert (info.version, info.cuda) == ("2.28.9", "13.0")
    assert (info.rank, info.nranks, info.cuda_dev, info.bus_id) == (0, 2, 0, "60")
    assert info.transports["P2P/CUMEM"] == 24
    assert info.used_transports() == {"P2P/CUMEM": 24}
    assert info.transports["SHM"] == info.transports["NET/Socket"] == info.transports["NET/IB"] == 0
    assert info.nchannels == 24
    assert info.rings == ["0 1"] * 24
    assert len(info.trees) == 24
    assert info.trees[0] == "1/-1/-1->0->-1" and info.trees[6] == "-1/-1/-1->0->1"
    assert info.network == "Socket"
    assert info.nvls is False
    assert info.warnings == []
    assert info.topology[0] == "=== System : maxBw 370.8 totalBw 370.8 ==="
    assert info.topo_max_bw == 370.8
    assert any("NVL[370.8] - NVS/0-0" in line for line in info.topology)
    assert len(info.colls) == 4
    assert info.colls[0] == dict(op="AllReduce", opCount=0, count=1024, datatype=7, dtype="float32", redop="sum",
                                 root=0, comm="0x30c243d0", nranks=2)
    assert info.comms[0]["comm_id"] == "0x3e2b6d7210981b13"


def test_real_log_rank1_and_a_log_without_graph_or_coll():
    r1 = nccl_info.parse(read("skip_nccl.1.log"))
    assert (r1.rank, r1.cuda_dev, r1.bus_id) == (1, 1, "70")
    assert r1.rings == [] and r1.nchannels == 24        # only rank 0 prints the ring lines
    assert r1.trees[0] == "-1/-1/-1->1->0"
    assert len(r1.colls) == 3                           # rank 1 skipped the fourth all_reduce
    other = nccl_info.parse(read("mismatch_op_nccl.1.log"))
    assert other.version == "2.28.9" and other.rank == 1
    assert other.used_transports() == {"P2P/CUMEM": 24}
    assert other.topology == [] and other.topo_max_bw is None and other.colls == []


def test_summaries():
    info = nccl_info.parse(read("skip_nccl.0.log"))
    en, zh = info.summary("en"), info.summary("zh")
    for fact in ("NCCL 2.28.9", "CUDA 13.0", "Rank 0 of 2", "P2P/CUMEM x24", "24 channels", "Socket",
                 "NVLS (NVLink SHARP) off", "maxBw 370.8", "NVL (NVLink)", "4 COLL lines", "opCount is 0",
                 "0 NCCL WARN"):
        assert fact in en, fact
    for fact in ("NCCL 2.28.9", "rank 0", "P2P/CUMEM ×24", "24 个通道", "Socket", "已关闭", "4 行 COLL"):
        assert fact in zh, fact
    assert len(en) < 800 and len(zh) < 600


@pytest.mark.parametrize("text", ["", "warm ok 8.0\nafter collective\nslept\n",
                                  "Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: boom\n",
                                  "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n"])
def test_not_an_nccl_log(text):
    assert not nccl_info.is_nccl_log(text)
    info = nccl_info.parse(text)
    assert info.version is None and info.recognised == 0 and info.rank is None
    assert info.used_transports() == {} and info.colls == [] and info.warnings == []
    assert info.summary("en").startswith("Not an NCCL log")
    assert info.summary("zh").startswith("这不是 NCCL 日志")


def test_real_logs_are_nccl_logs():
    for name in ("skip_nccl.0.log", "skip_nccl.1.log", "mismatch_op_nccl.1.log"):
        assert nccl_info.is_nccl_log(read(name))


# Line shapes from other NCCL versions and setups; written for this test in NCCL's formats
# (src/debug.cc prefixes, transport names of src/transport/*.cc), not captured from a machine.
OTHER_FORMATS = """\
NCCL version 2.18.1+cuda12.1
[default0]:node7:1200:1200 [0] NCCL INFO ncclCommInitRank comm 0x55d0 rank 3 nranks 16 cudaDev 3 busId 4e000 - Init START
[default0]:node7:1200:1200 [0] NCCL INFO Using network IB
node7:1200:1200 [3] NCCL INFO Channel 00 : 3[4e000] -> 4[51000] via P2P/IPC/read
node7:1200:1200 [3] NCCL INFO Channel 01/0 : 3[3] -> 2[2] via P2P/direct pointer
node7:1200:1200 [3] NCCL INFO Channel 02/0 : 3[3] -> 5[5] via SHM/direct/direct
node7:1200:1200 [3] NCCL INFO Channel 00/0 : 11[3] -> 3[3] [receive] via NET/IB/0/GDRDMA
node7:1200:1200 [3] NCCL INFO Channel 00/0 : 3[3] -> 11[3] [send] via NET/IB/1(0)/GDRDMA
node7:1200:1200 [3] NCCL INFO Channel 01/0 : 3[3] -> 11[3] [send] via NET/Socket/0
node7:1200:1200 [3] NCCL INFO 32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer
node7:1200:1200 [3] NCCL INFO AllGather: opCount 1f sendbuff 0x7f00 recvbuff 0x7f80 count 4096 datatype 9 op 0 root 0 comm 0x55d0 [nranks=16] stream 0x9a0

[2026-11-30 02:50:28] node7:1200:1300 [3] transport/net_ib.cc:1696 (ncclIbTest) NCCL WARN NET/IB : Got completion from peer 10.0.0.8<34567> with status=12 opcode=0 len=0 vendor err 129 (Recv)
node7:1200:1300 [3] include/socket.h:422 NCCL WARN Net : Connection closed by remote peer node8<51234>
"""


def test_other_formats():
    info = nccl_info.parse(OTHER_FORMATS)
    assert info.version == "2.18.1" and info.cuda == "12.1"
    assert (info.rank, info.nranks, info.cuda_dev, info.bus_id) == (3, 16, 3, "4e000")
    assert info.network == "IB"
    assert info.used_transports() == {"P2P/IPC": 1, "P2P/direct pointer": 1, "SHM": 1, "NET/IB": 2, "NET/Socket": 1}
    assert info.nchannels == 32 and info.nvls is True
    assert info.colls[0]["op"] == "AllGather" and info.colls[0]["opCount"] == 31
    assert info.colls[0]["dtype"] == "bfloat16"
    assert len(info.warnings) == 2
    assert "status=12" in info.warnings[0] and info.warnings[0].startswith("node7:1200:1300 [3] transport/net_ib.cc")
    assert "Connection closed by remote peer" in info.warnings[1]
    assert "2 NCCL WARN lines" in info.summary("en")
    assert nccl_info.transport_name("P2P/CUMEM/read") == "P2P/CUMEM"


def test_topo_real():
    t = topo.parse(read("topo.txt"))
    assert t.gpus == ["GPU0", "GPU1"] and t.nics == []
    assert t.matrix[("GPU0", "GPU1")] == t.matrix[("GPU1", "GPU0")] == "NV18"
    assert t.matrix[("GPU0", "GPU0")] == "X"
    assert t.affinity["GPU0"] == {"CPU Affinity": "0-31", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"}
    assert t.meaning("NV18") == "Connection traversing a bonded set of 18 NVLinks"
    out = t.render()
    assert "NV18 = Connection traversing a bonded set of 18 NVLinks" in out
    assert "X    = Self" in out and "PIX" not in out      # only the codes the matrix uses
    assert "\x1b" not in out
    assert "18 条捆绑在一起的 NVLink" in t.render("zh")
    assert topo.is_topo(read("topo.txt")) and not topo.is_topo(read("skip_nccl.0.log"))


# The layout of a machine with NICs (columns NIC0.., a NIC legend); written for this test.
WITH_NICS = ("\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
             "GPU0\t X \tSYS\tPIX\t0-23\t0\t\tN/A\n"
             "GPU1\tSYS\t X \tSYS\t24-47\t1\t\tN/A\n"
             "NIC0\tPIX\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n")


def test_topo_with_nics_and_bad_input():
    t = topo.parse(WITH_NICS)
    assert t.gpus == ["GPU0", "GPU1"] and t.nics == ["NIC0"] and t.nic_names == {"NIC0": "mlx5_0"}
    assert t.link("GPU0", "NIC0") == "PIX" and t.link("GPU0", "GPU1") == "SYS"
    assert t.affinity["GPU1"]["CPU Affinity"] == "24-47"
    out = t.render()
    assert "SYS  = Connection traversing PCIe as well as the SMP interconnect" in out  # from the built-in legend
    assert "NIC0: mlx5_0" in out
    with pytest.raises(ValueError, match="nvidia-smi topo -m"):
        topo.parse(read("skip_nccl.0.log"))


# The keys of a real dump (probe on H200 x2, torch 2.11, NCCL 2.28.9): top level and per entry.
REAL_TOP = ["version", "pg_config", "comm_lib_version", "pg_status", "entries"]
REAL_ENTRY = ["frames", "record_id", "pg_id", "process_group", "thread_name", "thread_id", "collective_seq_id",
              "p2p_seq_id", "op_id", "profiling_name", "time_created_ns", "duration_ms", "input_sizes",
              "input_dtypes", "output_sizes", "output_dtypes", "state", "time_discovered_started_ns",
              "time_discovered_completed_ns", "retired", "timeout_ms", "is_p2p"]


def load(d, rank):
    return json.loads((d / f"fr.{rank}.json").read_text())


@pytest.mark.parametrize("kind", synthetic.KINDS)
def test_synthetic_job(tmp_path, kind):
    world, culprit, seq = 8, 5, 27
    synthetic.make_job(tmp_path, world, culprit, kind, seq, seed=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"fr.{r}.json" for r in range(world))
    dumps = [load(tmp_path, r) for r in range(world)]
    for r, d in enumerate(dumps):
        assert list(d) == REAL_TOP and d["comm_lib_version"] == "2.28.9"
        assert d["pg_config"]["0"]["ranks"] == str(list(range(world)))
        seqs = [e["collective_seq_id"] for e in d["entries"]]
        last = seq - 1 if (kind == "missing" and r == culprit) else seq
        assert seqs == list(range(last - 19, last + 1))           # the last 20 collectives
        assert d["pg_status"]["0"]["last_enqueued_collective"] == last
        for e in d["entries"]:
            keys = REAL_ENTRY if e["state"] == "completed" else [k for k in REAL_ENTRY if k != "duration_ms"]
            assert list(e) == keys
    names = [{e["collective_seq_id"]: e["profiling_name"] for e in d["entries"]} for d in dumps]
    assert all(n[s] == names[0][s] for n in names for s in n if s in names[0])   # one program on all ranks
    tail = {r: d["entries"][-1] for r, d in enumerate(dumps)}
    others = [r for r in range(world) if r != culprit]
    if kind == "missing":
        assert tail[culprit]["collective_seq_id"] == seq - 1 and tail[culprit]["state"] == "completed"
        assert all(tail[r]["state"] == "started" and tail[r]["time_discovered_completed_ns"] is None for r in others)
        assert all(dumps[r]["pg_status"]["0"]["last_completed_collective"] == seq - 1 for r in range(world))
    elif kind == "straggler":
        assert all(t["state"] == "completed" for t in tail.values())
        late = tail[culprit]["time_created_ns"] - max(tail[r]["time_created_ns"] for r in others)
        assert late > 1e9                                          # more than a second late
        assert all(tail[r]["duration_ms"] > 1000 for r in others) and tail[culprit]["duration_ms"] < 1
    else:
        sizes = {r: tail[r]["input_sizes"] for r in range(world)}
        assert all(sizes[r] == sizes[others[0]] for r in others) and sizes[culprit] != sizes[others[0]]
        assert all(t["state"] == "started" for t in tail.values())


def test_synthetic_is_deterministic_and_scales(tmp_path):
    a, b, c = (synthetic.make_job(tmp_path / n, 4, 1, "missing", 9, seed=s) for n, s in [("a", 7), ("b", 7), ("c", 8)])
    assert (a / "fr.2.json").read_bytes() == (b / "fr.2.json").read_bytes() != (c / "fr.2.json").read_bytes()
    assert len(load(a, 0)["entries"]) == 9 and len(load(a, 1)["entries"]) == 8
    big = synthetic.make_job(tmp_path / "big", 1024, 1000, "missing", 40, seed=0)
    assert len(list(big.glob("fr.*.json"))) == 1024
    assert load(big, 1000)["entries"][-1]["collective_seq_id"] == 39
    with pytest.raises(ValueError):
        synthetic.make_job(tmp_path / "bad", 4, 4, "missing", 3)
    with pytest.raises(ValueError):
        synthetic.make_job(tmp_path / "bad", 4, 1, "slow", 3)
