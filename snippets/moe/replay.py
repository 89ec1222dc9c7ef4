"""Why RL on MoE needs routing replay: the rollout engine (bf16, its own batch layout) and the trainer (fp32)
compute slightly different router scores, and wherever two experts' scores are close the top-k choice flips.
A flipped expert changes the token's log-probability, so the importance ratio pi_train / pi_rollout is off
even before any update. Replay records the rollout's expert choices and reuses them in the training forward;
the gates still come from the training scores, so the router keeps its gradient."""
from __future__ import annotations

import torch
import torch.nn.functional as F


class TinyMoE:
    """A stack of MoE layers (sigmoid router, top-k, small expert MLPs) with a shared output head."""

    def __init__(self, layers=4, dim=64, experts=16, k=2, vocab=128, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.k, self.experts = k, experts
        self.router = [torch.randn(dim, experts, generator=g) / dim**0.5 for _ in range(layers)]
        self.w1 = [torch.randn(experts, dim, 2 * dim, generator=g) / dim**0.5 for _ in range(layers)]
        self.w2 = [torch.randn(experts, 2 * dim, dim, generator=g) / (2 * dim) ** 0.5 for _ in range(layers)]
        self.head = torch.randn(dim, vocab, generator=g) / dim**0.5

    def forward(self, x: torch.Tensor, dtype=torch.float32, replay: list[torch.Tensor] | None = None):
        """Log-probabilities [tokens, vocab] and each layer's chosen experts [tokens, k]. With replay, each layer
        uses the given choices instead of its own top-k."""
        h = x.to(dtype)
        choices = []
        for i, r in enumerate(self.router):
            scores = torch.sigmoid(h @ r.to(dtype)).float()
            chosen = scores.topk(self.k, -1).indices if replay is None else replay[i]
            gates = scores.gather(-1, chosen)
            gates = (gates / gates.sum(-1, keepdim=True)).to(dtype)
            w1, w2 = self.w1[i].to(dtype)[chosen], self.w2[i].to(dtype)[chosen]  # [tokens, k, ...]
            y = torch.einsum("tkh,tkhd->tkd", F.gelu(torch.einsum("td,tkdh->tkh", h, w1)), w2)
            h = h + (gates[..., None] * y).sum(1)
            choices.append(chosen)
        return F.log_softmax((h @ self.head.to(dtype)).float(), -1), choices


# --8<-- [start:mismatch]
def mismatch(model: TinyMoE, tokens: int = 4096, seed: int = 1) -> dict:
    """Rollout (bf16) against training (fp32) forwards of the same tokens, without and with replay: the fraction
    of router decisions that differ (per layer, and tokens with a difference in any layer) and the spread of
    the importance ratio of each token's sampled output."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, model.router[0].shape[0], generator=g)
    logp_roll, roll = model.forward(x, torch.bfloat16)
    sampled = torch.multinomial(logp_roll.exp(), 1, generator=g)[:, 0]
    out = {}
    for name, replay in [("before_replay", None), ("after_replay", roll)]:
        logp_train, train = model.forward(x, torch.float32, replay)
        differs = [(torch.sort(a, -1).values != torch.sort(b, -1).values).any(-1) for a, b in zip(roll, train)]
        ratio = (logp_train.gather(1, sampled[:, None]) - logp_roll.gather(1, sampled[:, None])).exp()
        out[name] = {"per_layer": [float(d.float().mean()) for d in differs],
                     "decisions": float(torch.stack(differs).float().mean()),
                     "tokens_any_layer": float(torch.stack(differs).any(0).float().mean()),
                     "ratio_abs_dev_p99": float((ratio - 1).abs().quantile(0.99))}
    return out
# --8<-- [end:mismatch]
