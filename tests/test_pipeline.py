"""Pipeline schedules: the simulated bubble and held activations against the papers' formulas, and 1F1B on
four gloo processes against one process's float64 gradients."""
import random

import pytest

from snippets.common.checks import fresh_seed, max_rel_error
from snippets.pipeline.schedules import (bubble_formula, gpipe, held_formula, interleaved, one_f_one_b, simulate,
                                         timeline, zb_h1)

FB = {"F": 1, "B": 2, "W": 0}  # whole backward twice a forward
FBW = {"F": 1, "B": 1, "W": 1}  # zero-bubble's T_F = T_B = T_W


def _ops_complete(sched, m, v=1, kinds="FB"):
    for ops in sched:
        assert sorted((op.kind, op.mb, op.chunk) for op in ops) == sorted(
            (k, j, c) for k in kinds for j in range(m) for c in range(v))


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 8, 16])
def test_gpipe_and_1f1b_same_bubble_different_memory(p, m):
    for name, sched in (("gpipe", gpipe(p, m)), ("1f1b", one_f_one_b(p, m))):
        _ops_complete(sched, m)
        r = simulate(sched, FB)
        assert r["bubble"] == pytest.approx(bubble_formula(name, p, m), abs=1e-12)
        assert r["peak_held"] == [held_formula(name, p, m, d) for d in range(p)]


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("v", [2, 3, 4])
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_interleaved(p, v, groups):
    m = groups * p
    sched = interleaved(p, m, v)
    _ops_complete(sched, m, v)
    r = simulate(sched, FB)
    assert r["bubble"] == pytest.approx(bubble_formula("interleaved", p, m, v), abs=1e-12)
    assert r["bubble"] < bubble_formula("1f1b", p, m)
    assert r["peak_held"] == pytest.approx([held_formula("interleaved", p, m, d, v) for d in range(p)])
    assert r["peak_held"][0] > held_formula("1f1b", p, m, 0) or m == p  # more memory on the first device


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("extra", [0, 1, 5, 12])
def test_zb_h1_third_of_the_bubble_same_peak(p, extra):
    m = p + extra
    sched = zb_h1(p, m)
    _ops_complete(sched, m, kinds="FBW")
    r = simulate(sched, FBW)
    assert r["bubble"] == pytest.approx(bubble_formula("zb_h1", p, m), abs=1e-12)
    one = simulate(one_f_one_b(p, m), {"F": 1, "B": 2, "W": 0})  # B+W as one backward
    assert one["makespan"] - 3 * m == 3 * (r["makespan"] - 3 * m)  # a third of 1F1B's idle time
    assert max(r["peak_held"]) == max(one["peak_held"]) == p


def test_random_costs_keep_1f1b_equal_to_gpipe():
    rng = random.Random(fresh_seed())
    for _ in range(20):
        p, m = rng.randint(2, 6), rng.randint(1, 12)
        cost = {"F": rng.randint(1, 5), "B": rng.randint(1, 9), "W": 0}
        assert simulate(gpipe(p, m), cost)["makespan"] == simulate(one_f_one_b(p, m), cost)["makespan"] \
            == (m + p - 1) * (cost["F"] + cost["B"])


def test_deadlock_detected_and_timeline():
    bad = one_f_one_b(2, 2)
    bad[0] = list(reversed(bad[0]))  # a backward before its forward
    with pytest.raises(RuntimeError, match="deadlock"):
        simulate(bad, FB)
    rows = timeline(one_f_one_b(4, 8), FB).splitlines()
    assert len(rows) == 4 and all(r.count(".") == 3 * 3 for r in rows)  # (p-1)(F+B) idle cells per device


def test_1f1b_on_gloo_matches_single_process():
    from snippets.pipeline.pp import reference_grads, run

    seed, p, m, rows, dim = fresh_seed(), 4, 6, 8, 32
    got = run(p=p, m=m, rows=rows, dim=dim, seed=seed)
    ref = reference_grads(seed, p, m, rows, dim)
    for s in range(p):
        assert max_rel_error(got[s]["w_grad"], ref[s][0]) < 1e-5, s
        assert max_rel_error(got[s]["b_grad"], ref[s][1]) < 1e-5, s
        assert got[s]["peak_held"] == held_formula("1f1b", p, m, s)
