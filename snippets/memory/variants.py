"""Two cases the lab does not run, estimated from the same per-layer inventory as snippets/memory/estimate.py
and checked against autograd on the CPU (tests/test_memory.py):

LoRA with adapters on some projections only (Hugging Face names: q_proj, k_proj, v_proj, o_proj, gate_proj,
up_proj, down_proj), every base weight frozen - a frozen linear layer without an adapter saves no input for a
weight gradient, so activations fall below full training's;

full recomputation at long context - every layer keeps only its bf16 input, and backward rebuilds one layer at
a time - with the tokens split over TP + SP or CP ranks."""
from __future__ import annotations

import torch
from torch import nn

from snippets.memory.estimate import activations, layer_activations
from snippets.memory.model import Config, Decoder

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _shapes(c: Config) -> dict[str, tuple[int, int]]:
    q, kv, h, f = c.heads * c.head_dim, c.kv_heads * c.head_dim, c.hidden, c.intermediate
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, f), "up_proj": (h, f), "down_proj": (f, h)}


def lora_adapter_params(c: Config, targets=PROJECTIONS, rank: int = 16) -> int:
    """rank x (inputs + outputs) for each adapted projection of each block."""
    return c.layers * sum(rank * sum(_shapes(c)[p]) for p in targets)


# --8<-- [start:lora]
# The tensor a projection's weight gradient needs (its input), as named in estimate.layer_activations;
# o_proj's input, the attention output, is kept by attention's backward anyway.
WEIGHT_GRAD_INPUT = {
    "q_proj": "norm 1 output (q, kv projections)", "k_proj": "norm 1 output (q, kv projections)",
    "v_proj": "norm 1 output (q, kv projections)", "o_proj": None,
    "gate_proj": "norm 2 output (gate/up)", "up_proj": "norm 2 output (gate/up)",
    "down_proj": "silu(gate) * up"}


def lora_activations(c: Config, batch: int, seq: int, targets=PROJECTIONS, rank: int = 16) -> int:
    """Saved for backward with every base weight frozen and LoRA adapters on `targets`. A frozen projection
    saves its input only if an adapter on it needs it (for the adapter's A gradient); each adapter also saves
    its rank-r intermediate (for B's gradient). Block 0's input comes from a frozen embedding and needs no
    gradient, so its first norm saves nothing; the frozen embedding keeps no token ids, the frozen output layer
    no input."""
    if "q_proj" not in targets or not {"k_proj", "v_proj"} & set(targets):
        raise ValueError("block 0 is counted with q and k or v adapted, so that attention needs gradients")
    t, full = batch * seq, activations(c, batch, seq)
    rows = layer_activations(c, t)
    kept = {WEIGHT_GRAD_INPUT[p] for p in targets}
    dropped = sum(rows[r] for r in set(WEIGHT_GRAD_INPUT.values()) - kept if r)
    per_layer = sum(rows.values()) - dropped + 2 * t * rank * len(targets)
    first_norm = rows["layer input (norm 1)"] + 4 * t  # its input and its fp32 rstd
    frozen_ends = 8 * (t + batch) + 2 * t * c.hidden  # the embedding's token ids, the output layer's input
    return full - c.layers * sum(rows.values()) + c.layers * per_layer - first_norm - frozen_ends
# --8<-- [end:lora]


class _LoRALinear(nn.Module):
    """A frozen fused projection with adapters on some of its column blocks (say v of the fused kv)."""

    def __init__(self, base: nn.Linear, blocks: dict[int, tuple[int, int]], rank: int):
        super().__init__()
        self.base, self.blocks = base, blocks
        dt = base.weight.dtype
        self.a = nn.ParameterDict({str(i): nn.Parameter(torch.randn(rank, base.in_features, dtype=dt) / 8)
                                   for i in blocks})
        self.b = nn.ParameterDict({str(i): nn.Parameter(torch.randn(hi - lo, rank, dtype=dt) / 8)
                                   for i, (lo, hi) in blocks.items()})

    def forward(self, x):
        y = self.base(x)
        cuts = sorted({0, self.base.out_features, *(v for lo_hi in self.blocks.values() for v in lo_hi)})
        parts = []
        for lo, hi in zip(cuts, cuts[1:]):
            i = next((i for i, b in self.blocks.items() if b == (lo, hi)), None)
            part = y[..., lo:hi]
            parts.append(part if i is None else part + (x @ self.a[str(i)].t()) @ self.b[str(i)].t())
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def lora_model(c: Config, targets=PROJECTIONS, rank: int = 16, seed: int = 0) -> Decoder:
    """snippets/memory/model.py's Decoder in bf16, every weight frozen, adapters on `targets` of each block."""
    torch.manual_seed(seed)
    model = Decoder(c).to(torch.bfloat16).requires_grad_(False)
    q, kv, f = c.heads * c.head_dim, c.kv_heads * c.head_dim, c.intermediate
    where = {"q_proj": ("q", 0, (0, q)), "k_proj": ("kv", 0, (0, kv)), "v_proj": ("kv", 1, (kv, 2 * kv)),
             "o_proj": ("o", 0, (0, c.hidden)), "gate_proj": ("gate_up", 0, (0, f)),
             "up_proj": ("gate_up", 1, (f, 2 * f)), "down_proj": ("down", 0, (0, c.hidden))}
    for blk in model.blocks:
        per_module: dict[str, dict[int, tuple[int, int]]] = {}
        for p in targets:
            name, i, cols = where[p]
            per_module.setdefault(name, {})[i] = cols
        for name, blocks in per_module.items():
            setattr(blk, name, _LoRALinear(getattr(blk, name), blocks, rank))
    return model


# --8<-- [start:recompute]
def full_recompute(c: Config, batch: int, seq: int, shards: int = 1) -> dict[str, int]:
    """Activation bytes per GPU under full recomputation, the tokens split over `shards` ranks (TP with
    sequence parallelism, or CP): every layer keeps its bf16 input, 2sbh/shards (Korthikanti et al.), and
    backward rebuilds one layer at a time, holding what that layer saves - the layer_activations
    inventory, memory-efficient attention, no s x s scores - once more."""
    t = batch * seq // shards
    return {"layer inputs": c.layers * 2 * t * c.hidden,
            "one layer rebuilt": sum(layer_activations(c, t).values())}
# --8<-- [end:recompute]
