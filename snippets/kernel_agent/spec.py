"""A task: a reference in fp64, the eager baseline to beat, input generators, shapes and tolerances.

Candidates implement `kernel(*inputs, out)` and write the result into `out`, which the harness allocates
and fills with NaN before every call. The tasks themselves are in `tasks.py`.
"""
from __future__ import annotations

import inspect
import random
from dataclasses import dataclass, field
from typing import Callable

import torch

DISTRIBUTIONS = ("normal", "uniform", "shifted")  # not only N(0, 1): METR and KernelBench v0.1 hardening


@dataclass(frozen=True)
class Task:
    name: str
    reference: Callable  # fp64 in, fp64 out: the ground truth
    baseline: Callable  # PyTorch eager in the task's dtype, returning its result: the time to beat
    arrays: Callable[[dict], dict]  # shape dict -> {input name: tensor shape}
    dims: dict  # mode -> {dim: (low, high)}; secret shapes are drawn from these ranges
    example: dict  # the published shape (candidates may see it; passing it alone proves nothing)
    bench: dict  # mode -> shape dict timed against the baseline
    out_shape: Callable[[dict], tuple]
    atol: float
    rtol: float
    entry: str = "kernel"
    banned_ops: frozenset = field(default_factory=frozenset)  # advisory: ops that would do this task's work
    dtype: torch.dtype = torch.float32
    ints: dict = field(default_factory=dict)  # input name -> shape dict -> (low, high): integer inputs
    level: int = 1  # KernelBench's level: 1 one operator, 2 a fusion of several

    def draw_shapes(self, rng: random.Random, mode: str, n: int) -> list[dict]:
        """n shapes, stratified: shape i falls in the i-th of n slices of every range (small to large)."""
        shapes = []
        for i in range(n):
            shape = {}
            for dim, (lo, hi) in self.dims[mode].items():
                a = lo + (hi - lo + 1) * i // n
                b = max(a, lo + (hi - lo + 1) * (i + 1) // n - 1)
                shape[dim] = rng.randint(a, b)
            shapes.append(shape)
        rng.shuffle(shapes)
        return shapes

    def specs(self, shape: dict, dist: str) -> list[tuple]:
        """What the launcher's make_inputs draws: (name, shape, dtype, kind, a, b) per input."""
        dtype = str(self.dtype).removeprefix("torch.")
        found = []
        for name, dims in self.arrays(shape).items():
            if name in self.ints:
                lo, hi = self.ints[name](shape)
                found.append((name, tuple(dims), "int64", "int", lo, hi))
            elif dist == "uniform":
                found.append((name, tuple(dims), dtype, "uniform", -2.0, 2.0))
            elif dist == "shifted" and name == "x":
                found.append((name, tuple(dims), dtype, "normal", 20.0, 3.0))  # softmax must subtract the max
            else:
                found.append((name, tuple(dims), dtype, "normal", 0.0, 1.0))
        return found

    def reference_of(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        return self.reference(*(t.double() if t.is_floating_point() else t for t in inputs))

    def baseline_source(self) -> str:
        """The baseline as a module the launcher loads like a candidate, in a sandbox of its own."""
        return ("import torch\nimport torch.nn.functional as F\n\n" + inspect.getsource(self.baseline)
                + f"\n\nkernel = {self.baseline.__name__}\n")


def describe(task: Task, mode: str) -> str:
    """The task as a proposer sees it: signature, shapes, tolerances (a prompt's opening)."""
    names = ", ".join(task.arrays(task.example))
    dims = ", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in task.dims[mode].items())
    return (f"task {task.name}: write `{task.entry}({names}, out)` that writes {task.reference.__name__}"
            f"({names}) into out ({str(task.dtype)[6:]}); shapes {dims}; example {task.example}; "
            f"tolerance |out - ref| <= {task.atol:g} + {task.rtol:g}*|ref| against fp64; "
            f"timed at {task.bench[mode]} against eager PyTorch; the work must run in your own Triton or CUDA "
            f"kernels (PyTorch ops that compute are refused)")
