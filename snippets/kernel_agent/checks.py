"""Correctness: compare an output with the fp64 reference and name how it fails.

The worker reports what only it can see (inputs changed, an earlier output buffer written, the output
changing after the call returned); the parent compares values, so a candidate cannot patch the comparison.
"""
from __future__ import annotations

import torch

NOT_WRITTEN = "output not written"
PARTIAL = "output not fully written"
INPUT_MUTATED = "input mutated"
LATE_WRITE = "output changed after the call returned"
REUSED_BUFFER = "reuses an earlier output buffer"
CACHED = "returns a cached result"
LOW_PRECISION = "lower precision than allowed"
WRONG = "wrong result"
SPECIAL_CASED = "special-cases the published shapes"
TIMING_PHASE = "behaves differently during timing"
RAISED = "raised an exception"
FORGED_TIME = "timing disagrees with the harness's clock"
FORGED_REPLY = "reply not the launcher's"
LOOSE_RTOL = 2e-2  # bf16/fp16/tf32 results land inside this band and outside the task's tolerance


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-equal values, NaN equal to NaN."""
    return a.shape == b.shape and torch.equal(torch.nan_to_num(a, nan=7.25), torch.nan_to_num(b, nan=7.25)) \
        and torch.equal(a.isnan(), b.isnan())


def where(mask: torch.Tensor) -> str:
    idx = tuple(int(i) for i in mask.nonzero()[0])
    return f"at index {idx}, {int(mask.sum())} of {mask.numel()} elements"


def compare(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float,
            earlier: list[torch.Tensor] = ()) -> tuple[str | None, float]:
    """(None or the named problem, max abs error). `earlier`: this candidate's outputs for other inputs."""
    out64 = out.double()
    if out.shape != ref.shape:
        return f"{WRONG} (shape {tuple(out.shape)}, expected {tuple(ref.shape)})", float("inf")
    poison = out64.isnan() & ~ref.isnan()  # the harness filled `out` with NaN before the call
    if poison.all():
        return f"{NOT_WRITTEN} (every element still holds the poison NaN)", float("inf")
    if poison.any():
        return f"{PARTIAL} (poison NaN left {where(poison)})", float("inf")
    err = (out64 - ref).abs()
    bad = ~(err <= atol + rtol * ref.abs())  # NaN and inf count as bad
    max_err = float(err.max()) if err.numel() else 0.0
    if not bad.any():
        return None, max_err
    if any(same(out, e) for e in earlier if e.shape == out.shape):
        return f"{CACHED} (identical to its output for earlier, different inputs)", max_err
    rms = float(ref.pow(2).mean().sqrt()) if ref.numel() else 0.0  # a sum's rounding scales with its terms
    if bool((err <= LOOSE_RTOL * (ref.abs() + rms)).all()):
        return (f"{LOW_PRECISION} (max error {max_err:.2e} > {atol:g} + {rtol:g}*|ref|, "
                f"within a bf16/tf32-sized error)"), max_err
    return f"{WRONG} (max error {max_err:.2e}, {int(bad.sum())} of {bad.numel()} elements out of tolerance " \
           f"{where(bad)})", max_err


def classify_error(message: str) -> str:
    """The verdict for an exception raised in the worker."""
    low = message.lower()
    if "can't allocate memory" in low or "out of memory" in low or low.startswith("memoryerror"):
        return "out of memory"
    if "illegal memory access" in low or "misaligned address" in low:
        return "crashed"
    return "rejected"
