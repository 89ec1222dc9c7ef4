"""Speculative decoding's sampler: a draft model proposes k tokens, the target scores them all in one pass, and
each is accepted with probability min(1, p/q); at the first rejection one token is drawn from the normalised
max(0, p - q), and if all k are accepted one more is drawn from the target. The tokens that come out follow the
target's distribution exactly (Leviathan et al. 2023, Chen et al. 2023); with temperature 0 (one-hot p and q)
it reduces to "keep the draft's tokens while they equal the target's argmax".

Models here are functions from a token sequence to next-token probabilities at every position ([len, vocab]),
as one forward pass of a causal model gives them."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Stats:
    proposed: int = 0
    accepted: int = 0
    rounds: int = 0
    target_calls: int = 0
    history: list[int] = field(default_factory=list)  # accepted draft tokens per round

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0


# --8<-- [start:step]
def speculative_round(target, draft, seq: list[int], k: int, gen: torch.Generator, stats: Stats | None = None):
    """Extend seq by 1 to k + 1 tokens. target(seq) and draft(seq) give next-token probabilities per position."""
    proposal, q = [], []
    for _ in range(k):  # the draft runs k times, one token each (it is the cheap model)
        probs = draft(seq + proposal)[-1]
        proposal.append(int(torch.multinomial(probs, 1, generator=gen)))
        q.append(probs)
    p = target(seq + proposal)[len(seq) - 1:]  # one target pass: k + 1 next-token distributions
    out, accepted = [], 0
    for i, tok in enumerate(proposal):
        if torch.rand((), generator=gen, dtype=p.dtype) < torch.clamp(p[i][tok] / q[i][tok], max=1.0):
            out.append(tok)
            accepted += 1
            continue
        residual = torch.clamp(p[i] - q[i], min=0.0)  # where the target wants more than the draft offered
        out.append(int(torch.multinomial(residual / residual.sum(), 1, generator=gen)))
        break
    else:
        out.append(int(torch.multinomial(p[k], 1, generator=gen)))  # all accepted: one more from the target
    if stats is not None:
        stats.proposed += k
        stats.accepted += accepted
        stats.rounds += 1
        stats.target_calls += 1
        stats.history.append(accepted)
    return out
# --8<-- [end:step]


def generate(target, draft, prompt: list[int], n: int, k: int, gen: torch.Generator, stats: Stats | None = None):
    """n new tokens by speculative rounds (the last round's surplus is dropped)."""
    seq = list(prompt)
    while len(seq) < len(prompt) + n:
        seq += speculative_round(target, draft, seq, k, gen, stats)
    return seq[len(prompt):len(prompt) + n]


def sample_plain(target, prompt: list[int], n: int, gen: torch.Generator) -> list[int]:
    """The reference: n tokens drawn from the target one at a time."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(torch.multinomial(target(seq)[-1], 1, generator=gen)))
    return seq[len(prompt):]


def bigram_model(logits: torch.Tensor, temperature: float = 1.0):
    """A toy causal model whose next-token distribution depends on the last token only: logits [vocab, vocab].
    temperature 0 gives one-hot (greedy) distributions."""
    if temperature == 0:
        probs = torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double()
    else:
        probs = torch.softmax(logits.double() / temperature, -1)

    def model(seq: list[int]) -> torch.Tensor:
        return probs[torch.tensor(seq)]
    model.probs = probs
    return model


def sequence_distribution(model, prompt: list[int], n: int) -> dict[tuple[int, ...], float]:
    """Exact probability of every n-token continuation (small vocabularies only)."""
    dist = {(): 1.0}
    for _ in range(n):
        nxt = {}
        for tail, pr in dist.items():
            probs = model(prompt + list(tail))[-1]
            for tok in torch.nonzero(probs).flatten().tolist():
                nxt[tail + (tok,)] = pr * float(probs[tok])
        dist = nxt
    return dist
