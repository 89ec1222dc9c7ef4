"""snippets/memory on the CPU: parameter counts equal the published ones; the ZeRO paper's model-state
examples come out of the same formula; the activation estimate equals, byte for byte, what autograd saves
for the model (Llama- and Qwen3-style blocks, with and without recomputation); the master-weight optimizer
is Adam; the fused RMSNorm's gradients are right."""

import pytest
import torch

from snippets.memory import estimate as est
from snippets.memory import model as m
from snippets.memory.train import MasterAdam, saved_bytes


@pytest.mark.parametrize("config, published", [
    (m.LLAMA_8B, 8.03e9), (m.LLAMA_70B, 70.6e9), (m.QWEN3_8B, 8.2e9), (m.QWEN3_32B, 32.8e9)])
def test_parameter_counts_match_the_model_cards(config, published):
    assert abs(est.n_params(config) / published - 1) < 0.005, est.n_params(config)


def test_qwen3_32b_non_embedding_count_matches_its_card():
    c = m.QWEN3_32B
    assert round((est.n_params(c) - 2 * c.vocab * c.hidden) / 1e9, 1) == 31.2


def test_zero_paper_examples():
    """Rajbhandari et al., sections 3.1 and 5: 1.5B -> 24 GB; 7.5B on 64 ranks -> 120, 31.4, 16.6, 1.9 GB."""
    assert est.model_states(int(1.5e9)) == 24e9
    got = [est.model_states(int(7.5e9), zero=z, ranks=64) / 1e9 for z in range(4)]
    assert [round(x, 1) for x in got] == [120.0, 31.4, 16.6, 1.9]


def test_kv_cache_per_token():
    assert est.kv_cache(m.LLAMA_8B, 1) == 128 * 1024  # 2 x 32 layers x 8 heads x 128 x 2 bytes
    assert est.kv_cache(m.QWEN3_32B, 1) == 256 * 1024


def test_korthikanti_gpt3_attention_term():
    """Section 5: for GPT-3 (a=96, s=2048, h=12288), 5as/h = 80 against 34: selective recomputation saves 70 %."""
    full = est.korthikanti(2048, 1, 12288, 96, 1)
    selective = est.korthikanti(2048, 1, 12288, 96, 1, recompute="selective")
    assert round(1 - selective / full, 2) == 0.70


@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_activation_estimate_equals_what_autograd_saves(qk_norm, recompute):
    c = m.Config("tiny", 96, 2, 6, 2, 16, 160, 300, qk_norm=qk_norm)
    torch.manual_seed(0)
    model = m.Decoder(c).to(torch.bfloat16)
    batch, seq = 3, 40
    tokens = torch.randint(0, c.vocab, (batch, seq + 1))
    assert saved_bytes(model, tokens, recompute) == est.activations(c, batch, seq, recompute)


def test_master_adam_is_adamw():
    torch.manual_seed(0)
    a = [torch.randn(70, 30, requires_grad=True), torch.randn(300, requires_grad=True)]
    b = [x.detach().clone().requires_grad_() for x in a]
    ours = MasterAdam(a, lr=1e-2, weight_decay=0.1)
    ref = torch.optim.AdamW(b, lr=1e-2, betas=ours.betas, eps=ours.eps, weight_decay=0.1)
    for _ in range(3):
        g = [torch.randn_like(x) for x in a]
        for x, y, gi in zip(a, b, g):
            x.grad, y.grad = gi.clone(), gi.clone()
        ours.step()
        ref.step()
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def test_rms_norm_gradients():
    x = torch.randn(4, 5, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w: m._RMSNorm.apply(x, w, 1e-6), (x, w))


@pytest.mark.gpu
def test_allocator_peak_matches_the_estimate():
    from snippets.memory.train import measure

    c = m.Config("small", 1024, 2, 8, 2, 128, 2816, 32000, qk_norm=True)
    for recompute in ("none", "full"):
        r = measure(c, 2, 1024, recompute)
        e = est.training_peak(c, 2, 1024, recompute)
        assert abs(e.activations / r["activations"] - 1) < 0.01  # the allocator rounds each block up to 512 bytes
        assert abs(e.peak / r["peak"] - 1) < 0.05, (e.peak, r["peak"])
