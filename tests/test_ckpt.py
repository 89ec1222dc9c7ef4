"""snippets/ckpt on gloo: a DCP checkpoint of an FSDP2 model and its Adam state saved by four ranks and loaded
by two equals, tensor by tensor and bit for bit, what was saved (and a load that is skipped does not: the
comparison can fail); dcp.async_save returns before the checkpoint is written, and the checkpoint holds the
state at the step it was taken while training goes on."""

import pytest

from snippets.ckpt import run as cr
from snippets.common.checks import fresh_seed


@pytest.fixture(scope="module")
def result():
    return cr.run(save_world=4, load_world=2, dim=16, layers=2, steps=2, seed=fresh_seed())


def test_four_ranks_save_two_load_every_tensor_exactly(result):
    assert result["keys_match"] and result["tensors"] >= 8
    assert result["exact"], result["mismatched"]
    assert result["control_differs"]


def test_async_checkpoint_holds_the_step_it_was_taken_at(result):
    for rank, r in result["async"].items():
        assert r["holds_the_step_taken"] and r["differs_from_later"], (rank, r)
        assert r["blocked_s"] > 0 and r["sync_s"] > 0
