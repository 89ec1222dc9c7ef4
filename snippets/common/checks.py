"""How every lab checks a result before it times it: fresh random inputs, poisoned outputs, a reference in
higher precision.

    fresh_seed        a seed nobody chose, so a check cannot pass by luck of one fixed input
    empty             where kernels allocate their outputs; inside poisoned_outputs() the memory starts poisoned
    poisoned_empty    NaN (floats) or a sentinel (integers): an element a kernel skips stays visible
    rel_error         relative Frobenius error against a reference, in float64
    max_rel_error     largest elementwise error relative to the reference's largest magnitude, in float64
    assert_close      fail naming what was compared, where, and by how much
"""
from __future__ import annotations

import contextlib
import random

import torch

INT_SENTINEL = -1  # what an unwritten integer output holds when poisoned (masks and indices are >= 0)

_poison = [False]  # set only by poisoned_outputs()


def fresh_seed() -> int:
    """A seed from the OS's entropy: every run checks on inputs no one picked."""
    return random.SystemRandom().randrange(2**31)


def poisoned_empty(shape, dtype, device) -> torch.Tensor:
    """An output buffer filled with NaN (floats) or INT_SENTINEL (integers) instead of leftover memory."""
    fill = float("nan") if dtype.is_floating_point or dtype.is_complex else INT_SENTINEL
    return torch.full(shape, fill, dtype=dtype, device=device)


def empty(shape, dtype, device) -> torch.Tensor:
    """torch.empty, or poisoned_empty inside poisoned_outputs(): kernels allocate their outputs here."""
    if _poison[0]:
        return poisoned_empty(shape, dtype, device)
    return torch.empty(shape, dtype=dtype, device=device)


@contextlib.contextmanager
def poisoned_outputs():
    """Within the block every output allocated through `empty` starts poisoned, so a skipped write shows."""
    saved, _poison[0] = _poison[0], True
    try:
        yield
    finally:
        _poison[0] = saved


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want|| / ||want|| in float64 (NaN when got holds a NaN)."""
    want = want.double()
    return ((got.double() - want).norm() / want.norm()).item()


def max_rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| in float64 (NaN when got holds a NaN)."""
    got, want = got.double(), want.double()
    diff = (got - want).abs()
    worst = diff.max() if not diff.isnan().any() else torch.tensor(float("nan"))
    return (worst / want.abs().max().clamp_min(torch.finfo(torch.float64).tiny)).item()


def assert_close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float = 0.0, what: str = "result") -> None:
    """Every element within atol + rtol |want| of the float64 reference; NaN never is. The message names `what`."""
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    got64, want64 = got.double(), want.double()
    bad = ~((got64 - want64).abs() <= atol + rtol * want64.abs())  # NaN compares False: it is bad
    if bad.any():
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.numel()} elements off (rtol {rtol:g}, atol {atol:g}); "
                             f"first at {idx}: {got64[idx].item():.6g} vs {want64[idx].item():.6g}")
