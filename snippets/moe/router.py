"""Top-k routing and the two ways of keeping experts evenly loaded: the Switch auxiliary loss (a gradient that
pushes the router's probabilities toward balance) and DeepSeek-V3's auxiliary-loss-free bias (a per-expert
bias added to the scores for top-k *selection only*, nudged by gamma after every step: down if the expert was
overloaded, up if underloaded; the gate weights still come from the unbiased scores)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


# --8<-- [start:route]
def route(scores: torch.Tensor, k: int, bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """scores [tokens, experts] (router affinities, sigmoid as in DeepSeek-V3). Returns (experts [tokens, k],
    gates [tokens, k]): selection by scores + bias, gates from the unbiased scores, normalised over the k."""
    chosen = (scores if bias is None else scores + bias).topk(k, dim=-1).indices
    gates = scores.gather(-1, chosen)
    return chosen, gates / gates.sum(-1, keepdim=True)


def load(chosen: torch.Tensor, experts: int) -> torch.Tensor:
    """Tokens per expert (float)."""
    return torch.bincount(chosen.flatten(), minlength=experts).float()


def maxvio(tokens_per_expert: torch.Tensor) -> float:
    """(max - mean) / mean tokens per expert: 0 is perfect balance."""
    mean = tokens_per_expert.mean()
    return float((tokens_per_expert.max() - mean) / mean)


def switch_aux_loss(probs: torch.Tensor, chosen: torch.Tensor, experts: int) -> torch.Tensor:
    """Switch Transformer's loss N * sum_i f_i * P_i: f_i the fraction of routed slots that went to expert i,
    P_i the mean router probability of expert i; 1 at perfect balance. Its gradient flows through P_i."""
    f = load(chosen, experts) / chosen.numel()
    return experts * (f * probs.mean(0)).sum()


def update_bias(bias: torch.Tensor, tokens_per_expert: torch.Tensor, gamma: float) -> torch.Tensor:
    """The sign rule: overloaded experts' bias goes down by gamma, underloaded ones' up (Megatron's
    get_updated_expert_bias does the same after an all-reduce of the counts)."""
    return bias + gamma * torch.sign(tokens_per_expert.mean() - tokens_per_expert)
# --8<-- [end:route]


def drifting_tokens(step: int, steps: int, batch: int, dim: int, clusters: int, gen: torch.Generator,
                    centres: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of token features whose mix of clusters shifts during training, as an RL policy's outputs do:
    the cluster weights move from uniform toward a few dominant clusters. Returns (x, cluster ids)."""
    t = step / max(steps - 1, 1)
    logits = -3.0 * t * torch.arange(clusters, dtype=torch.float32) / clusters  # early clusters come to dominate
    ids = torch.multinomial(torch.softmax(logits, 0), batch, replacement=True, generator=gen)
    x = centres[ids] + 0.5 * torch.randn(batch, dim, generator=gen)
    return x, ids


def train_router(mode: str, steps: int = 400, batch: int = 512, dim: int = 32, experts: int = 16, k: int = 2,
                 alpha: float = 0.01, gamma: float = 1e-3, lr: float = 0.05, seed: int = 0) -> dict:
    """Train a linear router under drift. Its task: send each token's cluster to that cluster's own expert (a
    stand-in for experts specialising). mode 'none', 'aux' (Switch loss with weight alpha) or 'auxfree' (sign
    bias with rate gamma). Returns per-step MaxVio and the quality proxy: the fraction of tokens whose own expert
    is among the k chosen."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(experts, dim, generator=gen) * 2.0
    w = (0.01 * torch.randn(dim, experts, generator=gen)).requires_grad_()
    opt = torch.optim.SGD([w], lr=lr)
    bias = torch.zeros(experts)
    out = {"maxvio": [], "quality": []}
    for step in range(steps):
        x, own = drifting_tokens(step, steps, batch, dim, experts, gen, centres)
        logits = x @ w
        scores = torch.sigmoid(logits)
        chosen, _ = route(scores.detach(), k, bias if mode == "auxfree" else None)
        loss = F.cross_entropy(logits, own)  # the task: own expert first
        if mode == "aux":
            loss = loss + alpha * switch_aux_loss(torch.softmax(logits, -1), chosen, experts)
        opt.zero_grad()
        loss.backward()
        opt.step()
        counts = load(chosen, experts)
        if mode == "auxfree":
            bias = update_bias(bias, counts, gamma)
        out["maxvio"].append(maxvio(counts))
        out["quality"].append(float((chosen == own[:, None]).any(-1).float().mean()))
    out["bias"] = bias
    return out
