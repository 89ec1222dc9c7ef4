"""snippets/cp on gloo with four CPU ranks: ring attention (zigzag chunks) and Ulysses each equal full causal
attention in the output and the gradients of q, k and v (float64); the bytes each rank sends equal the formulas;
the zigzag split gives every rank the same causal work; Ulysses refuses more ranks than heads."""

import pytest

from snippets.common.checks import fresh_seed
from snippets.cp import attention as cp
from snippets.cp import run as cr


@pytest.fixture(scope="module")
def ranks():
    return cr.run(world=4, batch=2, heads=4, seq=32, dim=8, seed=fresh_seed())


@pytest.mark.parametrize("kind", ["ring", "ulysses"])
def test_equal_to_full_attention_forward_and_backward(ranks, kind):
    for rank, r in ranks.items():
        assert r[kind]["max_rel_error"] < 1e-12, (rank, kind, r[kind])


@pytest.mark.parametrize("kind", ["ring", "ulysses"])
def test_bytes_sent_match_the_formula(ranks, kind):
    for r in ranks.values():
        assert cr.rel(r[kind]["sent_bytes"], r[kind]["comm_formula"]) < 0.02, r[kind]


def test_zigzag_chunks_balance_the_causal_work(ranks):
    pairs = {r["ring"]["causal_pairs"] for r in ranks.values()}
    assert len(pairs) == 1 and pairs.pop() == 32 * 33 // 2 // 4  # a quarter of the causal triangle each


def test_ulysses_cannot_use_more_ranks_than_heads(ranks):
    assert all("divide the heads" in r["one_head"] for r in ranks.values())


def test_zigzag_positions_cover_the_sequence_once():
    seen = sorted(int(p) for r in range(4) for p in cp.zigzag(32, 4, r))
    assert seen == list(range(32))
