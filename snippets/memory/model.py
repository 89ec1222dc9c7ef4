"""A Llama/Qwen-style decoder in plain PyTorch, built from a public configuration at any layer count: the
model whose training memory snippets/memory/estimate.py predicts and the lab measures."""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


@dataclass(frozen=True)
class Config:
    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    qk_norm: bool = False  # Qwen3 normalises each head's q and k

    def with_layers(self, layers: int) -> "Config":
        return replace(self, layers=layers)


# From each model's published config.json (research/model_shapes.md).
LLAMA_8B = Config("Llama-3.1-8B", 4096, 32, 32, 8, 128, 14336, 128256)
LLAMA_70B = Config("Llama-3.1-70B", 8192, 80, 64, 8, 128, 28672, 128256)
QWEN3_8B = Config("Qwen3-8B", 4096, 36, 32, 8, 128, 12288, 151936, qk_norm=True)
QWEN3_32B = Config("Qwen3-32B", 5120, 64, 64, 8, 128, 25600, 151936, qk_norm=True)
MODELS = [LLAMA_8B, LLAMA_70B, QWEN3_8B, QWEN3_32B]


class _RMSNorm(torch.autograd.Function):
    """Fused RMSNorm as trainers use it (Apex, Megatron, Liger): saves the input and one fp32 statistic per row,
    computes in fp32, returns the input's dtype."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        acc = torch.promote_types(x.dtype, torch.float32)
        xf = x.to(acc)
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return (xf * rstd * weight.to(acc)).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        xhat, dyf = x.to(rstd.dtype) * rstd, dy.to(rstd.dtype)
        dw = (dyf * xhat).flatten(0, -2).sum(0).to(weight.dtype)
        g = dyf * weight.to(rstd.dtype)
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx.to(x.dtype), dw, None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return _RMSNorm.apply(x, self.weight, self.eps)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


# --8<-- [start:block]
class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.norm1, self.norm2 = RMSNorm(c.hidden), RMSNorm(c.hidden)
        self.q = nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.kv = nn.Linear(c.hidden, 2 * c.kv_heads * c.head_dim, bias=False)
        self.o = nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)
        self.qk_norm = nn.ModuleList([RMSNorm(c.head_dim), RMSNorm(c.head_dim)]) if c.qk_norm else None
        self.gate_up = nn.Linear(c.hidden, 2 * c.intermediate, bias=False)
        self.down = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x, cos, sin):
        c, (b, s, _) = self.c, x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, s, c.heads, c.head_dim)
        k, v = self.kv(h).view(b, s, 2, c.kv_heads, c.head_dim).unbind(2)
        if self.qk_norm is not None:
            q, k = self.qk_norm[0](q), self.qk_norm[1](k)
        q, k, v = rope(q, cos, sin).transpose(1, 2), rope(k, cos, sin).transpose(1, 2), v.transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)
# --8<-- [end:block]


class Decoder(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.hidden)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.hidden)
        self.head = nn.Linear(c.hidden, c.vocab, bias=False)

    def forward(self, tokens: torch.Tensor, recompute: str = "none") -> torch.Tensor:
        """Logits; recompute="full" keeps only each block's input and recomputes the block in backward."""
        s, dtype = tokens.shape[1], self.head.weight.dtype
        pos = torch.arange(s, device=tokens.device, dtype=torch.float32)
        freq = 500000.0 ** (-torch.arange(0, self.c.head_dim, 2, device=tokens.device) / self.c.head_dim)
        angle = torch.cat([pos[:, None] * freq] * 2, dim=-1)[:, None, :]  # [s, 1, head_dim]
        cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
        x = self.embed(tokens)
        for blk in self.blocks:
            x = checkpoint(blk, x, cos, sin, use_reentrant=False) if recompute == "full" else blk(x, cos, sin)
        return self.head(self.norm(x))


def loss_fn(model: Decoder, tokens: torch.Tensor, recompute: str = "none") -> torch.Tensor:
    """Next-token cross-entropy on fp32 logits, as trainers compute it."""
    logits = model(tokens[:, :-1], recompute).float()
    return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
