"""The launcher that runs inside the sandbox, one process per candidate; it imports only torch and Triton.

Nothing it replies is trusted: the harness re-derives the inputs from the seeds, checks every output
against its own reference, holds the outputs to the digests sent before them, and times the whole
exchange with its own clock. The profiler is started before the candidate's calls and its functions
are bound before the candidate's code is imported.
"""
from __future__ import annotations

import importlib.util
import io
import os
import struct
import sys
import threading
import time

import torch
from torch._C._autograd import _disable_profiler, _enable_profiler, _prepare_profiler
from torch._C._profiler import ProfilerActivity, ProfilerConfig, ProfilerState, _ExperimentalConfig

HEADER = struct.Struct("<Q")
MAX_MESSAGE = 1 << 31
_torch_save, _torch_load, _sync = torch.save, torch.load, torch.cuda.synchronize  # bound before any candidate


def send(fd: int, obj) -> None:
    buf = io.BytesIO()
    _torch_save(obj, buf)
    data = buf.getvalue()
    os.write(fd, HEADER.pack(len(data)))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            raise EOFError("pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive(fd: int, limit: int = MAX_MESSAGE):
    (n,) = HEADER.unpack(_read_exact(fd, HEADER.size))
    if n > limit:
        raise ValueError(f"message of {n} bytes over the {limit}-byte limit")
    return _torch_load(io.BytesIO(_read_exact(fd, n)), weights_only=True)


# --8<-- [start:inputs]
def make_inputs(specs: list, seed: int, device: str) -> list[torch.Tensor]:
    """Inputs from a seed; the harness calls the same function to rebuild them for its reference.
    specs: (name, shape, dtype name, kind, a, b); normal: mean a, std b; uniform: [a, b); int: [a, b)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    out = []
    for _, shape, dtype, kind, a, b in specs:
        if kind == "int":
            t = torch.randint(int(a), int(b), tuple(shape), generator=gen, device=device)
        elif kind == "uniform":
            t = torch.empty(tuple(shape), device=device).uniform_(a, b, generator=gen)
        else:
            t = torch.empty(tuple(shape), device=device).normal_(a, b, generator=gen)
        out.append(t.to(getattr(torch, dtype)))
    return out
# --8<-- [end:inputs]


_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def digest(t: torch.Tensor, key: int) -> int:
    """A keyed, position-weighted sum of the output's bit patterns: int32 products (wrapping) summed in
    int64, exact and independent of summation order, so the harness recomputes it on any device."""
    flat = t.detach().contiguous().reshape(-1)
    bits = flat.view(_INT_VIEW[flat.element_size()])
    if bits.dtype != torch.int32:
        bits = bits.to(torch.int64)
    weights = _weights(bits.numel(), key, bits.dtype, bits.device)
    return int((bits * weights).sum(dtype=torch.int64))


_WEIGHTS: dict = {}


def _weights(n: int, key: int, dtype: torch.dtype, device) -> torch.Tensor:
    k = (n, key, dtype, str(device))
    if k not in _WEIGHTS:
        _WEIGHTS.clear()
        w = torch.arange(n, dtype=torch.int64, device=device) * ((key % 65521) | 1) + (key % 8191)
        _WEIGHTS[k] = (w % 2147483629).to(dtype)
    return _WEIGHTS[k]


SPAN = "kb::candidate_call"
_span_enter, _span_exit = torch.ops.profiler._record_function_enter_new, torch.ops.profiler._record_function_exit


class Profile:
    """CPU ops and GPU kernels recorded while the candidate runs (Kineto, bound before the candidate).
    Each call is wrapped in a span; only what starts inside a span is the candidate's (the launcher's own
    staging and digests fall outside, after a device-wide synchronize)."""

    def __init__(self, device: str):
        acts = {ProfilerActivity.CPU} | ({ProfilerActivity.CUDA} if device.startswith("cuda") else set())
        self.acts, self.cfg = acts, ProfilerConfig(ProfilerState.KINETO, False, False, False, False, False,
                                                   _ExperimentalConfig())

    def start(self) -> "Profile":
        _prepare_profiler(self.cfg, self.acts)
        _enable_profiler(self.cfg, self.acts)
        return self

    def stop(self) -> dict:
        """{"DEVICE\tname": [count, total ns]} of what started inside a span."""
        events = [(e.name(), str(e.device_type()).rsplit(".", 1)[-1], e.start_ns(), e.duration_ns())
                  for e in _disable_profiler().events()]
        spans = sorted((t0, t0 + ns) for name, _, t0, ns in events if name == SPAN)
        found: dict = {}
        for name, dev, t0, ns in events:
            if name != SPAN and any(a <= t0 <= b for a, b in spans):
                item = found.setdefault(f"{dev}\t{name[:300]}", [0, 0])
                item[0] += 1
                item[1] += int(ns)
        return found

    @staticmethod
    def span():
        return _Span()


class _Span:
    def __enter__(self):
        self.handle = _span_enter(SPAN, None)

    def __exit__(self, *exc):
        _span_exit._RecordFunction(self.handle)


LAUNCHES: dict = {}
WATCH: dict = {"out": None, "after": None, "by_kernel": False}  # the output, as the last launch left it


def count_interpreter_launches() -> None:
    """On the CPU, Triton's interpreter launches no device kernels for the profiler to see: count the
    launches here, and note the output as each launch leaves it, so a write outside the kernels shows."""
    from triton.runtime.interpreter import InterpretedFunction

    run = InterpretedFunction.run

    def counted(self, *args, **kwargs):
        if kwargs.get("warmup"):
            return run(self, *args, **kwargs)
        LAUNCHES[self.fn.__name__] = LAUNCHES.get(self.fn.__name__, 0) + 1
        out, before = WATCH["out"], WATCH["after"]
        result = run(self, *args, **kwargs)
        if out is not None:
            after = out.clone()
            WATCH["by_kernel"] |= before is None or not _same(before, after)
            WATCH["after"] = after
        return result

    InterpretedFunction.run = counted


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal; on the CPU through numpy, so the check adds no ops to the profile it is part of."""
    if a.device.type == "cpu" and b.device.type == "cpu":
        import numpy

        return a.shape == b.shape and numpy.array_equal(a.detach().numpy(), b.detach().numpy(), equal_nan=True)
    return torch.equal(a.nan_to_num(7.25), b.nan_to_num(7.25)) and torch.equal(a.isnan(), b.isnan())


class Launcher:
    def __init__(self, device: str, scratch: str):
        self.device, self.scratch, self.fn, self.returns, self.outs = device, scratch, None, False, []
        if device == "cpu":
            count_interpreter_launches()

    def _launches(self) -> dict:
        found = dict(LAUNCHES)
        LAUNCHES.clear()
        return found

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            _sync()

    def _call(self, ins: list, out: torch.Tensor) -> torch.Tensor:
        if self.returns:  # a baseline returns its result; its copy into `out` is not timed
            return self.fn(*ins)
        self.fn(*ins, out)
        return out

    def load(self, source: str, entry: str, returns: bool = False) -> dict:
        path = os.path.join(self.scratch, "candidate.py")  # Triton's @jit reads its source through inspect
        with open(path, "w") as f:
            f.write(source)
        spec = importlib.util.spec_from_file_location("candidate", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["candidate"] = module
        spec.loader.exec_module(module)
        self.fn, self.returns = getattr(module, entry), returns
        self._launches()  # launches at import time are not calls
        return {"ok": True}

    def run(self, specs: list, seed: int, out_shape: tuple, out_dtype: str, join_s: float) -> dict:
        """One correctness trial: NaN-poisoned output; the inputs come back so the harness sees changes."""
        ins = make_inputs(specs, seed, self.device)
        out = torch.full(out_shape, float("nan"), dtype=getattr(torch, out_dtype), device=self.device)
        threads = set(threading.enumerate())
        WATCH.update(out=out, after=None, by_kernel=False)
        prof = Profile(self.device).start()
        with prof.span():
            res = self._call(ins, out)
            seen = res.clone()  # what the caller holds when the call returns
            self._sync()
            for t in set(threading.enumerate()) - threads:
                t.join(join_s)
        summary = prof.stop()
        late = not _same(res, seen)
        outside = self.device == "cpu" and not (WATCH["by_kernel"] and _same(WATCH["after"], seen))
        WATCH.update(out=None, after=None)
        return {"out": seen.cpu(), "inputs": [t.cpu() for t in ins], "late": late, "profile": summary,
                "launches": self._launches(), "outside": outside}

    def warm(self, specs: list, seeds: list, out_shape: tuple, out_dtype: str, calls: int) -> dict:
        """Untimed calls that compile and warm caches; then the memory of a timed request is taken and
        given back, so the allocator holds it, and a small timed request runs, so that the kernels of the
        launcher's own work are loaded: the timed request pays for neither (the baseline's does not either)."""
        for seed in seeds:
            out = torch.full(out_shape, float("nan"), dtype=getattr(torch, out_dtype), device=self.device)
            self._call(make_inputs(specs, seed, self.device), out)
        held = [make_inputs(specs, seed, self.device) for seed in range(calls)]
        held += [torch.empty(out_shape, dtype=getattr(torch, out_dtype), device=self.device) for _ in range(calls)]
        del held
        self.time(specs, seeds, out_shape, out_dtype, key=len(seeds))  # loads every kernel a timed request uses
        self.outs = []
        self._sync()
        self._launches()
        return {"ok": True}

    def profile_start(self) -> dict:
        """Started in a request of its own, so that starting and stopping stay off the harness's clock."""
        self.prof = Profile(self.device).start()
        return {"ok": True}

    def profile_stop(self) -> dict:
        return {"profile": self.prof.stop(), "launches": self._launches()}

    def time(self, specs: list, seeds: list, out_shape: tuple, out_dtype: str, key: int) -> dict:
        """Every call gets its own inputs and output; each call is timed with events around it and a
        device-wide synchronize; all outputs stay here, committed by their digests, for the harness to fetch."""
        dtype = getattr(torch, out_dtype)
        sets = [make_inputs(specs, s, self.device) for s in seeds]
        outs = [torch.full(out_shape, float("nan"), dtype=dtype, device=self.device) for _ in sets]
        cuda = self.device.startswith("cuda")
        times, self.outs = [], []
        self._sync()
        for ins, out in zip(sets, outs):
            with Profile.span():
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    res = self._call(ins, out)
                    _sync()
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end))
                else:
                    t0 = time.perf_counter()
                    res = self._call(ins, out)
                    times.append((time.perf_counter() - t0) * 1e3)
            self.outs.append(res)
        return {"times": times, "digests": [digest(o, key) for o in self.outs]}

    def fetch(self, indices: list) -> dict:
        return {"outs": [self.outs[i].detach().cpu() for i in indices]}


def main(fd_in: int, fd_out: int, device: str, scratch: str) -> None:
    if device == "cpu":
        torch.set_num_threads(1)
    launcher = Launcher(device, scratch)
    while True:
        rid, cmd, args = receive(fd_in)
        if cmd == "exit":
            return
        try:
            reply = getattr(launcher, cmd)(**args)
        except BaseException as e:  # the candidate's exception is a result, not the worker's end
            reply = {"error": f"{type(e).__name__}: {e}"[:2000]}
        send(fd_out, (rid, reply))


def profile_once() -> None:
    """Under ncu: one warm-up call that compiles, then one call between profiler start and stop."""
    import json

    job = json.load(sys.stdin)
    launcher = Launcher("cuda", os.environ.get("TMPDIR", "/tmp"))
    launcher.load(job["source"], job["entry"])
    ins = make_inputs(job["specs"], job["seed"], "cuda")
    out = torch.empty(job["out_shape"], dtype=getattr(torch, job["out_dtype"]), device="cuda")
    launcher._call(ins, out)
    _sync()
    torch.cuda.profiler.start()
    launcher._call(ins, out)
    _sync()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    if sys.argv[1] == "profile":
        profile_once()
    else:
        main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
