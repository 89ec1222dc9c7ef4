"""A task: a reference in fp64, the eager baseline to beat, input generators, shapes and tolerances.

Candidates implement `kernel(*inputs, out)` and write the result into `out` (fp32), which the harness
allocates and fills with NaN before every call.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F

DISTRIBUTIONS = ("normal", "uniform", "shifted")  # not only N(0, 1): METR and KernelBench v0.1 hardening


@dataclass(frozen=True)
class Task:
    name: str
    reference: Callable  # fp64 in, fp64 out: the ground truth
    baseline: Callable  # PyTorch eager in the task's dtype: the time to beat
    arrays: Callable[[dict], dict]  # shape dict -> {input name: tensor shape}
    dims: dict  # mode -> {dim: (low, high)}; secret shapes are drawn from these ranges
    example: dict  # the published shape (candidates may see it; passing it alone proves nothing)
    bench: dict  # mode -> shape dict timed against the baseline
    out_shape: Callable[[dict], tuple]
    atol: float
    rtol: float
    entry: str = "kernel"
    banned_ops: frozenset = field(default_factory=frozenset)  # ops that would do this task's work
    dtype: torch.dtype = torch.float32

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

    def make_inputs(self, shape: dict, gen: torch.Generator, dist: str) -> tuple[torch.Tensor, ...]:
        """Fresh inputs (CPU, task dtype) from the secret generator; `dist` varies their values."""
        out = []
        for name, dims in self.arrays(shape).items():
            t = torch.randn(dims, generator=gen, dtype=torch.float64) if dist != "uniform" \
                else torch.rand(dims, generator=gen, dtype=torch.float64) * 4 - 2
            if dist == "shifted" and name == "x":
                t = t * 3 + 20  # large logits: softmax must subtract the row maximum
            out.append(t.to(self.dtype))
        return tuple(out)


def softmax_reference(x):
    return torch.softmax(x, dim=-1)


def softmax_baseline(x):
    return torch.softmax(x, dim=-1)


def add_rmsnorm_reference(x, residual, weight, eps=1e-6):
    h = x + residual
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight


def add_rmsnorm_baseline(x, residual, weight, eps=1e-6):  # unfused eager: one kernel per op
    h = x + residual
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight


def gemm_gelu_reference(a, b, bias):
    return F.gelu(a @ b + bias)


def gemm_gelu_baseline(a, b, bias):  # cuBLAS GEMM, then bias and GELU as separate kernels
    return F.gelu(torch.mm(a, b) + bias)


# Tolerances against an fp64 reference. bf16 rounds at 2**-8 ~ 4e-3 relative and tf32 at 2**-11 ~ 5e-4, so
# rtol 1e-5 rejects a kernel that computes or stores in either, while an fp32 kernel's error (~1e-7 per op)
# stays far below. The GEMM's fp32 sum over K rounds at the size of the running sum: summed one product at a
# time (tl.dot in "ieee" precision), K = 4096 of inputs up to |2| reaches ~1e-3 absolute, so its atol is 3e-3,
# while tf32 inputs put the typical element's error near 1e-2 at that K (tests/test_kernel_agent.py).
SOFTMAX = Task(
    name="softmax", reference=softmax_reference, baseline=softmax_baseline,
    arrays=lambda s: {"x": (s["M"], s["N"])},
    dims={"smoke": {"M": (1, 24), "N": (1, 300)}, "full": {"M": (1, 4096), "N": (1, 8192)}},
    example={"M": 32, "N": 128}, bench={"smoke": {"M": 8, "N": 200}, "full": {"M": 8192, "N": 8192}},
    out_shape=lambda s: (s["M"], s["N"]), atol=1e-6, rtol=1e-5,
    banned_ops=frozenset({"softmax", "log_softmax", "exp"}),
)
ADD_RMSNORM = Task(
    name="add_rmsnorm", reference=add_rmsnorm_reference, baseline=add_rmsnorm_baseline,
    arrays=lambda s: {"x": (s["M"], s["N"]), "residual": (s["M"], s["N"]), "weight": (s["N"],)},
    dims={"smoke": {"M": (1, 24), "N": (1, 300)}, "full": {"M": (1, 4096), "N": (1, 8192)}},
    example={"M": 32, "N": 128}, bench={"smoke": {"M": 8, "N": 200}, "full": {"M": 8192, "N": 4096}},
    out_shape=lambda s: (s["M"], s["N"]), atol=1e-5, rtol=1e-5,
    banned_ops=frozenset({"rms_norm", "layer_norm", "rsqrt"}),
)
GEMM_GELU = Task(
    name="gemm_bias_gelu", reference=gemm_gelu_reference, baseline=gemm_gelu_baseline,
    arrays=lambda s: {"a": (s["M"], s["K"]), "b": (s["K"], s["N"]), "bias": (s["N"],)},
    dims={"smoke": {"M": (1, 40), "N": (1, 40), "K": (1, 48)},
          "full": {"M": (1, 4096), "N": (1, 4096), "K": (1, 4096)}},
    example={"M": 32, "N": 32, "K": 32},
    bench={"smoke": {"M": 24, "N": 24, "K": 24}, "full": {"M": 4096, "N": 4096, "K": 1024}},
    out_shape=lambda s: (s["M"], s["N"]), atol=3e-3, rtol=1e-4,
    banned_ops=frozenset({"gelu", "erf"}),
)
TASKS = {t.name: t for t in (SOFTMAX, ADD_RMSNORM, GEMM_GELU)}


def describe(task: Task, mode: str) -> str:
    """The task as a proposer sees it: signature, shapes, tolerances (a prompt's opening)."""
    names = ", ".join(task.arrays(task.example))
    dims = ", ".join(f"{d} in [{lo}, {hi}]" for d, (lo, hi) in task.dims[mode].items())
    return (f"task {task.name}: write `{task.entry}({names}, out)` that writes {task.reference.__name__}"
            f"({names}) into out ({str(task.dtype)[6:]}); shapes {dims}; example {task.example}; "
            f"tolerance |out - ref| <= {task.atol:g} + {task.rtol:g}*|ref| against fp64; "
            f"timed at {task.bench[mode]} against eager PyTorch; ops banned: {sorted(task.banned_ops)}")
