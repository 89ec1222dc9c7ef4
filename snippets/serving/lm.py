"""The tiny decoder as the probability functions speculative.py takes (token sequence -> next-token
probabilities at every position), and its early-exit draft: the same model stopped after its first layers,
sharing every weight (self-speculative decoding, as in Draft & Verify and LayerSkip). Both recompute the
prefix on every call (no KV cache), so plain decoding is timed the same way."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from snippets.paged_kv.model import TinyDecoder


# --8<-- [start:lm]
def forward_logits(net: TinyDecoder, tokens: list[int], layers: int | None = None) -> torch.Tensor:
    """Logits [len, vocab] at every position, through the first `layers` layers (all by default)."""
    idx = torch.tensor(tokens, device=net.emb.device)
    x = net.emb[idx] + net.pos[:len(tokens)]
    for layer in net.layers[:layers]:
        q, k, v = net._qkv(x, layer)
        attn = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                              is_causal=True, enable_gqa=True).transpose(0, 1)
        x = net._finish(x, attn, layer)
    return F.rms_norm(x, (x.shape[-1],)) @ net.out


def as_model(net: TinyDecoder, layers: int | None = None, temperature: float = 0.0):
    """seq -> probabilities [len, vocab] (float64, on the CPU); temperature 0 gives one-hot rows (greedy)."""
    def model(seq: list[int]) -> torch.Tensor:
        logits = forward_logits(net, seq, layers).double().cpu()
        if temperature == 0:
            return F.one_hot(logits.argmax(-1), logits.shape[-1]).double()
        return torch.softmax(logits / temperature, -1)
    return model
# --8<-- [end:lm]
