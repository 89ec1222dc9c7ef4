"""snippets/tp on gloo with four CPU ranks: the tensor-parallel layer, with and without sequence parallelism,
equals the unsplit layer in forward and backward (float64); the bytes each rank sends per layer equal
Megatron's four all-reduces, and sequence parallelism's four all-gathers and four reduce-scatters, the same
volume; sequence parallelism saves fewer activation bytes per rank than tensor parallelism alone."""

import pytest

from snippets.common.checks import fresh_seed
from snippets.tp import parallel as tp
from snippets.tp import run as tr


@pytest.fixture(scope="module")
def ranks():
    return tr.run(world=4, seq=16, batch=2, hidden=64, heads=8, seed=fresh_seed())


@pytest.mark.parametrize("mode", ["tp", "sp"])
def test_equal_to_the_unsplit_layer_forward_and_backward(ranks, mode):
    for rank, r in ranks.items():
        assert r[mode]["max_rel_error"] < 1e-12, (rank, mode, r[mode])


@pytest.mark.parametrize("mode", ["tp", "sp"])
def test_bytes_sent_per_layer_match_the_formula(ranks, mode):
    for r in ranks.values():
        assert tr.rel(r[mode]["sent_bytes"], r[mode]["comm_formula"]) < 0.02, r[mode]
    assert ranks[0]["tp"]["comm_formula"] == ranks[0]["sp"]["comm_formula"]  # the same volume


def test_sequence_parallelism_saves_fewer_activations(ranks):
    r = ranks[0]
    assert r["sp"]["saved_bytes"] < r["tp"]["saved_bytes"] < r["reference_saved_bytes"]


def test_the_formula_counts_four_all_reduces():
    s, b, h, t = 2048, 1, 12288, 8  # GPT-3 175B's hidden size, one sequence, t = 8
    assert tp.comm_formula(s, b, h, t, 2, False) == pytest.approx(4 * 2 * 7 / 8 * s * b * h * 2)
