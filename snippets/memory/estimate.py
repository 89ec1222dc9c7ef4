"""How much GPU memory training or serving a decoder takes, from its configuration alone: model states
(weights, gradients, optimizer states, with ZeRO sharding), the activations autograd saves (per layer, with
and without recomputation), the loss's logits, and the KV cache. Sizes in bytes; T = batch x sequence tokens.

The activation inventory lists what snippets/memory/model.py's Block saves for backward in bf16, tensor by
tensor; Korthikanti et al.'s sbh(34 + 5as/h) is the same count for a GPT block (GeLU MLP of 4h, dropout,
attention scores materialised)."""
from __future__ import annotations

from dataclasses import dataclass

from snippets.memory.model import Config
from snippets.memory.train import CHUNK

GIB = 2**30


def params(c: Config) -> dict[str, int]:
    """Parameter counts: embedding, one layer, final norm + output layer (untied)."""
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    layer = c.hidden * (q + 2 * kv) + q * c.hidden + 3 * c.hidden * c.intermediate + 2 * c.hidden
    layer += 2 * c.head_dim if c.qk_norm else 0
    return {"embedding": c.vocab * c.hidden, "layer": layer, "head": c.hidden + c.hidden * c.vocab}


def n_params(c: Config) -> int:
    p = params(c)
    return p["embedding"] + c.layers * p["layer"] + p["head"]


# --8<-- [start:states]
# Bytes per parameter of each recipe: (weights, gradients, optimizer states).
RECIPES = {
    "bf16 + fp32 master + Adam": (2, 2, 12),  # ZeRO's 16 bytes: master weights, momentum, variance in fp32
    "fp32 + Adam": (4, 4, 8),
    "bf16 + 8-bit Adam": (2, 2, 2 + 4),  # two 8-bit moments plus fp32 master weights
    "bf16 inference": (2, 0, 0),
}


def model_states(n: int, recipe: str = "bf16 + fp32 master + Adam", zero: int = 0, ranks: int = 1) -> int:
    """ZeRO stage 1 shards optimizer states over the data-parallel ranks, stage 2 also gradients, stage 3 also
    weights (Rajbhandari et al., section 5)."""
    w, g, o = RECIPES[recipe]
    return int(n * (w / (ranks if zero >= 3 else 1) + g / (ranks if zero >= 2 else 1) + o / (ranks if zero >= 1 else 1)))


def lora_params(c: Config, rank: int = 16) -> int:
    """Adapter parameters of LoRA on every linear layer of every block: rank x (inputs + outputs) each."""
    q, kv, h, f = c.heads * c.head_dim, c.kv_heads * c.head_dim, c.hidden, c.intermediate
    shapes = [(h, q), (h, 2 * kv), (q, h), (h, 2 * f), (f, h)]  # the fused projections of snippets/memory/model.py
    return c.layers * sum(rank * (i + o) for i, o in shapes)


def lora_states(c: Config, rank: int = 16) -> int:
    """Frozen bf16 weights plus the adapters trained with mixed-precision Adam (16 bytes each)."""
    return 2 * n_params(c) + 16 * lora_params(c, rank)
# --8<-- [end:states]


# --8<-- [start:activations]
def layer_activations(c: Config, tokens: int, batch: int = 1) -> dict[str, int]:
    """What one Block saves for backward in bf16 (2 bytes; rstd and the softmax statistics in fp32)."""
    h, q, kv, f = c.hidden, c.heads * c.head_dim, c.kv_heads * c.head_dim, c.intermediate
    t = tokens
    rows = {
        "layer input (norm 1)": 2 * t * h, "norm 1 output (q, kv projections)": 2 * t * h,
        "kv projection output": 2 * t * 2 * kv, "q, k after RoPE": 2 * t * (q + kv),
        "attention output": 2 * t * q, "softmax statistics": 4 * t * c.heads,
        "residual (norm 2)": 2 * t * h, "norm 2 output (gate/up)": 2 * t * h,
        "gate/up output": 2 * t * 2 * f, "silu(gate)": 2 * t * f, "silu(gate) * up": 2 * t * f,
        "rms statistics": 4 * t * 2,
    }
    if c.qk_norm:
        rows["q before its norm"] = 2 * t * q
        rows["rms statistics"] += 4 * t * (c.heads + c.kv_heads)
    return rows


def activations(c: Config, batch: int, seq: int, recompute: str = "none") -> int:
    """Saved for backward at the end of the forward pass: the layers, the final norm and output layer, the fp32
    log-probabilities cross-entropy keeps, the token ids and the RoPE tables. With full recomputation a layer
    keeps only its input."""
    t = batch * seq
    per_layer = sum(layer_activations(c, t).values()) if recompute == "none" else 2 * t * c.hidden
    ids = 8 * (t + batch) + 8 * t + 4  # token ids (batch x (seq + 1)), the targets, the loss
    head = (2 * 2 * t * c.hidden + 4 * t) + 4 * t * c.vocab + ids + 2 * 2 * seq * c.head_dim
    return c.layers * per_layer + head
# --8<-- [end:activations]


def korthikanti(s: int, b: int, h: int, a: int, layers: int, t: int = 1, sp: bool = False,
                recompute: str = "none") -> float:
    """Activation bytes of a GPT layer stack in 16 bits (Korthikanti et al., sections 4.1-4.3)."""
    if recompute == "full":
        return 2 * s * b * h * layers
    attn = 0 if recompute == "selective" else 5 * a * s / h
    if sp or t == 1:
        return s * b * h * (34 + attn) / t * layers
    return s * b * h * (10 + 24 / t + attn / t) * layers


def kv_cache(c: Config, tokens: int, elem: int = 2) -> int:
    """Keys and values of every layer for `tokens` tokens (all sequences together)."""
    return 2 * c.layers * c.kv_heads * c.head_dim * elem * tokens


def serving(c: Config, kv_tokens: int, weight_bytes: float = 2, kv_bytes: int = 2) -> dict[str, int]:
    """Weights plus the KV cache of every token held at once (all sequences); engines such as vLLM measure the
    activations of one dummy forward pass and give the rest of their memory share to the cache."""
    return {"weights": int(n_params(c) * weight_bytes), "kv_cache": kv_cache(c, kv_tokens, kv_bytes)}


@dataclass
class Estimate:
    states: int  # weights, master weights and Adam moments: allocated before the forward pass
    activations: int  # saved for backward at the end of the forward pass
    peak: int


# --8<-- [start:peak]
def training_peak(c: Config, batch: int, seq: int, recompute: str = "none") -> Estimate:
    """Peak allocated bytes of one step of snippets/memory/train.py (bf16 weights and gradients, fp32 master
    weights and Adam moments), the larger of two moments:
    the start of backward, when the saved activations meet the fp32 gradients of the log-probabilities and of
    the logits (tokens x vocabulary each) - with recomputation, later, when one layer is rebuilt beside its
    weight gradients;
    the end, when every gradient exists and the optimizer holds two fp32 temporaries of one slice."""
    n, t = n_params(c), batch * seq
    states = n * (2 + 12)
    act = activations(c, batch, seq, recompute)
    start = states + act + 2 * 4 * t * c.vocab
    if recompute == "full":
        start = max(start, states + act + sum(layer_activations(c, t).values()) + 2 * params(c)["layer"])
    end = states + 2 * n + 2 * 4 * min(CHUNK, max(params(c).values()))
    return Estimate(states, act, max(start, end))
# --8<-- [end:peak]
