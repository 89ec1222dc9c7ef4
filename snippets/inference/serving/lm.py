"""The tiny decoder as the probability functions speculative.py takes (token sequence -> next-token
probabilities at every position); an early-exit draft (the same model stopped after its first layers, sharing
every weight, as in Draft & Verify and LayerSkip); and brief training on a synthetic Markov-chain language, with
a one-layer draft distilled from the target, so that a draft's acceptance rate means something (with random
weights nothing is predictable and drafts are almost never accepted). Models recompute the prefix on every call
(no KV cache), so plain decoding is timed the same way."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from snippets.inference.paged_kv.model import TinyDecoder


def forward_logits(net: TinyDecoder, tokens: list[int], layers: int | None = None) -> torch.Tensor:
    """Logits [len, vocab] at every position, through the first `layers` layers (all by default)."""
    return batched_logits(net, torch.tensor(tokens, device=net.emb.device)[None], layers)[0]


def as_model(net: TinyDecoder, layers: int | None = None, temperature: float = 0.0):
    """seq -> probabilities [len, vocab] (float64, on the CPU); temperature 0 gives one-hot rows (greedy)."""
    def model(seq: list[int]) -> torch.Tensor:
        logits = forward_logits(net, seq, layers).double().cpu()
        if temperature == 0:
            return F.one_hot(logits.argmax(-1), logits.shape[-1]).double()
        return torch.softmax(logits / temperature, -1)
    return model


def markov_corpus(vocab: int, n_seqs: int, length: int, branching: int = 2, seed: int = 0) -> torch.Tensor:
    """Sequences [n_seqs, length] from a random sparse Markov chain: each token has `branching` successors, the
    first taking 85 % of the mass. A synthetic language with structure to learn, downloaded from nowhere."""
    g = torch.Generator().manual_seed(seed)
    succ = torch.stack([torch.randperm(vocab, generator=g)[:branching] for _ in range(vocab)])
    probs = torch.full((branching,), 0.15 / max(branching - 1, 1))
    probs[0] = 0.85 if branching > 1 else 1.0
    seqs = torch.empty((n_seqs, length), dtype=torch.long)
    seqs[:, 0] = torch.randint(0, vocab, (n_seqs,), generator=g)
    for t in range(1, length):
        pick = torch.multinomial(probs, n_seqs, replacement=True, generator=g)
        seqs[:, t] = succ[seqs[:, t - 1], pick]
    return seqs


def batched_logits(net: TinyDecoder, tokens: torch.Tensor, layers: int | None = None) -> torch.Tensor:
    """forward_logits for a batch [B, L] of equal-length sequences: [B, L, vocab]."""
    b, n = tokens.shape
    x = net.emb[tokens] + net.pos[:n]
    for layer in net.layers[:layers]:
        h = F.rms_norm(x, (x.shape[-1],))
        q = (h @ layer["q"]).view(b, n, net.hq, net.d).transpose(1, 2)
        k = (h @ layer["k"]).view(b, n, net.hkv, net.d).transpose(1, 2)
        v = (h @ layer["v"]).view(b, n, net.hkv, net.d).transpose(1, 2)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2)
        x = x + attn.reshape(b, n, -1) @ layer["o"]
        x = x + F.gelu(F.rms_norm(x, (x.shape[-1],)) @ layer["up"]) @ layer["down"]
    return F.rms_norm(x, (x.shape[-1],)) @ net.out


def train(net: TinyDecoder, corpus: torch.Tensor, steps: int, batch: int = 32, lr: float = 3e-3, seed: int = 0,
          teacher: TinyDecoder | None = None) -> list[float]:
    """Next-token training on the corpus, in place (Adam); with a teacher, match its distribution instead (KL).
    Returns the loss per step."""
    params = [net.emb, net.pos, net.out] + [w for layer in net.layers for w in layer.values()]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=lr)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        toks = corpus[torch.randint(0, len(corpus), (batch,), generator=g)].to(net.emb.device)
        logits = batched_logits(net, toks[:, :-1])
        if teacher is None:
            loss = F.cross_entropy(logits.flatten(0, 1), toks[:, 1:].flatten())
        else:
            with torch.no_grad():
                target = F.log_softmax(batched_logits(teacher, toks[:, :-1]), -1)
            loss = F.kl_div(F.log_softmax(logits, -1), target, log_target=True, reduction="batchmean")
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    for p in params:
        p.requires_grad_(False)
    return losses
