"""How long the NCCL doctor takes on a big log, and how much memory: a benchmark, not a test.

    python -m snippets.nccl.bench_doctor [--mb 200] [--keep DIR]

Writes a job folder in a temp dir: rank0.log of about --mb MB (a training loop's output with
NCCL_DEBUG=INFO and SUBSYS=COLL interleaved: step lines, NCCL INFO and COLL lines, Python warnings,
and at the end PyTorch's watchdog lines) and a small rank1.log; then runs
`python -m snippets.nccl.doctor` on it in a child process and prints the wall time and the child's
peak resident memory (getrusage RUSAGE_CHILDREN ru_maxrss). Targets: under 10 s and 200 MB for 200 MB.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAIL = [
    "[rank0]:[E1130 02:51:32.258804753 ProcessGroupNCCL.cpp:2119] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=2048, "
    "NumelOut=2048, Timeout(ms)=600000) ran for 600063 milliseconds before timing out.",
    "[rank0]:[E1130 02:50:28.806724160 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) Rank 0]  "
    "failure detected by watchdog at work sequence id: {seq} PG status: last enqueued work: {seq}, "
    "last completed work: {done}",
]


def write_log(path: Path, mb: int) -> int:
    """A rank log of about `mb` MB; returns the last collective's number."""
    target, seq = mb << 20, 0
    with open(path, "w") as f:
        while f.tell() < target:
            block = []
            for _ in range(1000):
                seq += 1
                block.append(f"[rank0]: step {seq} loss {2.5 - (seq % 997) / 1000:.4f} lr 3.0e-04 "
                             f"tokens/s {41000 + seq % 313} grad_norm {0.5 + (seq % 89) / 100:.2f}")
                block.append(f"node-a:3468:3468 [0] NCCL INFO AllReduce: opCount {seq:x} sendbuff 0x7f8ecec00000 "
                             f"recvbuff 0x7f8ecec00000 count {1 << (10 + seq % 12)} datatype 7 op 0 root 0 "
                             "comm 0x30c243d0 [nranks=2] stream 0x5a3c0e0")
                if seq % 50 == 0:
                    block.append("node-a:3468:3468 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read")
                if seq % 400 == 0:
                    block.append("/job/train.py:88: UserWarning: The given NumPy array is not writable, and PyTorch "
                                 "does not support non-writable tensors.")
            f.write("\n".join(block) + "\n")
        f.write("\n".join(t.format(seq=seq + 1, done=seq) for t in TAIL) + "\n")
    return seq + 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m snippets.nccl.bench_doctor", description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=200, help="size of rank0.log in MB")
    p.add_argument("--keep", metavar="DIR", help="write the job here and keep it (default: a temp dir)")
    p.add_argument("--root", default=str(ROOT), help="repository whose snippets.nccl.doctor to run")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        job = Path(args.keep or tmp) / "bigjob"
        job.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        seq = write_log(job / "rank0.log", args.mb)
        (job / "rank1.log").write_text(TAIL[1].format(seq=seq, done=seq - 1).replace("rank0", "rank1")
                                       .replace("Rank 0", "Rank 1") + "\n")
        size = (job / "rank0.log").stat().st_size
        print(f"wrote {job / 'rank0.log'}: {size / 2**20:.0f} MiB, {seq} collectives, "
              f"in {time.perf_counter() - t:.1f} s")
        env = dict(os.environ, PYTHONPATH=args.root)
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "snippets.nccl.doctor", str(job)], cwd=args.root, env=env,
                           capture_output=True, text=True)
        wall = time.perf_counter() - t
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
        head = (r.stdout or r.stderr).splitlines()[:3]
        print(f"doctor exit {r.returncode} in {wall:.1f} s, peak RSS {peak_mb:.0f} MiB")
        print("\n".join("  " + ln for ln in head))
    return 0 if r.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
