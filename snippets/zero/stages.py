"""DDP and ZeRO stages 1, 2 and 3 written out on flat parameter buffers with torch.distributed collectives.

The model is a list of units (transformer blocks and a head); each unit's parameters live in one flat buffer,
padded to a multiple of the world size so that it splits into equal shards. Every rank runs the same unit loop:
forward through the units keeping only each unit's input, then backward unit by unit, recomputing the unit's
forward (activation checkpointing at unit boundaries), which lets ZeRO-3 free a unit's gathered parameters
between its forward and its backward without autograd hooks. The strategies differ only in what they keep and
which collectives they call. Each collective goes through `Comm`, which adds what a ring algorithm makes each
rank send: all-reduce 2(N-1)/N of the buffer, reduce-scatter and all-gather (N-1)/N of the full buffer each.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.func import functional_call

STRATEGIES = ("ddp", "zero1", "zero2", "zero3")


def tiny_transformer(dim: int, layers: int, heads: int = 4, seed: int = 0, dtype=torch.float64) -> list[nn.Module]:
    """The units: `layers` pre-norm transformer blocks (no dropout) and a linear head."""
    torch.manual_seed(seed)
    blocks = [nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True, norm_first=True)
              for _ in range(layers)]
    return [u.to(dtype) for u in [*blocks, nn.Linear(dim, dim)]]


def spec(unit: nn.Module) -> list[tuple[str, torch.Size]]:
    return [(n, p.shape) for n, p in unit.named_parameters()]


def flatten(unit: nn.Module, world: int) -> torch.Tensor:
    """The unit's parameters in one flat buffer, zero-padded to a multiple of `world`."""
    flat = torch.cat([p.detach().reshape(-1) for p in unit.parameters()])
    return torch.cat([flat, flat.new_zeros(-flat.numel() % world)])


def call(unit: nn.Module, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Run the unit with its parameters taken as views of `flat`."""
    params, i = {}, 0
    for name, shape in spec(unit):
        n = math.prod(shape)
        params[name] = flat[i:i + n].view(shape)
        i += n
    return functional_call(unit, params, (x,))


# --8<-- [start:comm]
class Comm:
    """The collectives, each adding what a ring algorithm makes this rank send (bytes)."""

    def __init__(self):
        self.world, self.rank, self.sent = dist.get_world_size(), dist.get_rank(), 0.0

    def all_reduce(self, buf):  # reduce-scatter then all-gather: 2(N-1)/N of the buffer
        self.sent += 2 * (self.world - 1) / self.world * buf.numel() * buf.element_size()
        dist.all_reduce(buf)

    def reduce_scatter(self, full):  # (N-1)/N of the full buffer; returns this rank's summed shard
        self.sent += (self.world - 1) / self.world * full.numel() * full.element_size()
        shard = full.new_empty(full.numel() // self.world)
        dist.reduce_scatter(shard, list(full.chunk(self.world)))
        return shard

    def all_gather(self, shard):  # (N-1)/N of the full buffer it assembles
        full = shard.new_empty(shard.numel() * self.world)
        self.sent += (self.world - 1) / self.world * full.numel() * full.element_size()
        dist.all_gather(list(full.chunk(self.world)), shard)
        return full
# --8<-- [end:comm]


class Adam:
    """Adam on one flat buffer (the whole of it or this rank's shard): the same update as torch.optim.Adam."""

    def __init__(self, numel, dtype, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        self.m, self.v = torch.zeros(numel, dtype=dtype), torch.zeros(numel, dtype=dtype)
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, 0

    def step(self, p, g):
        b1, b2 = self.betas
        self.t += 1
        self.m.mul_(b1).add_(g, alpha=1 - b1)
        self.v.mul_(b2).addcmul_(g, g, value=1 - b2)
        denom = (self.v / (1 - b2**self.t)).sqrt_().add_(self.eps)
        p.addcdiv_(self.m, denom, value=-self.lr / (1 - b1**self.t))


class Trainer:
    """One rank's share of data-parallel training under `kind` (ddp, zero1, zero2 or zero3)."""

    def __init__(self, kind: str, units: list[nn.Module], lr: float = 1e-3):
        assert kind in STRATEGIES, kind
        self.kind, self.units, self.comm = kind, units, Comm()
        n, r = self.comm.world, self.comm.rank
        full = [flatten(u, n) for u in units]
        self.params = [f.chunk(n)[r].clone() for f in full] if kind == "zero3" else full
        own = [f.numel() // n if kind != "ddp" else f.numel() for f in full]
        self.opt = [Adam(k, f.dtype, lr) for k, f in zip(own, full)]
        self.grads, self.reduced = [None] * len(units), [None] * len(units)

    # --8<-- [start:step]
    def full_params(self, i):  # ZeRO-3 gathers a unit's parameters each time it runs; the rest hold them
        return self.comm.all_gather(self.params[i]) if self.kind == "zero3" else self.params[i]

    def step(self, x, y):
        inputs, h = [], x
        with torch.no_grad():  # forward: keep each unit's input only; ZeRO-3 drops the gathered weights
            for i, u in enumerate(self.units):
                inputs.append(h)
                h = call(u, self.full_params(i), h)
        h.requires_grad_()
        nn.functional.mse_loss(h, y).backward()
        g = h.grad / self.comm.world  # the mean over ranks of each rank's mean loss
        for i in reversed(range(len(self.units))):  # backward, recomputing each unit's forward
            p = self.full_params(i).detach().requires_grad_()
            x_in = inputs[i].detach().requires_grad_(i > 0)
            call(self.units[i], p, x_in).backward(g)
            g = x_in.grad
            if self.kind == "ddp":
                self.comm.all_reduce(p.grad)  # every rank gets the whole summed gradient
                self.grads[i] = p.grad
            elif self.kind == "zero1":
                self.grads[i] = p.grad  # the whole gradient stays until the step
            else:  # ZeRO-2 and -3: reduce-scatter at once and keep only this rank's shard
                self.grads[i] = self.comm.reduce_scatter(p.grad)
        n, r = self.comm.world, self.comm.rank
        for i, opt in enumerate(self.opt):
            if self.kind in ("ddp", "zero3"):  # DDP: the whole; ZeRO-3: its shard, and that is all it holds
                opt.step(self.params[i], self.grads[i])
            else:  # ZeRO-1 and -2: update this rank's shard, then all-gather the whole parameters
                g_own = self.comm.reduce_scatter(self.grads[i]) if self.kind == "zero1" else self.grads[i]
                self.reduced[i] = g_own  # kept for the check only
                p_own = self.params[i].chunk(n)[r].clone()
                opt.step(p_own, g_own)
                self.params[i] = self.comm.all_gather(p_own)
    # --8<-- [end:step]

    def memory(self) -> dict:
        """Bytes this rank holds between steps: parameters, gradients, optimizer states (Adam's m and v)."""
        size = lambda ts: sum(t.numel() * t.element_size() for t in ts)  # noqa: E731
        return {"params": size(self.params), "grads": size(self.grads),
                "optimizer": size([o.m for o in self.opt] + [o.v for o in self.opt])}

    def gathered(self, what: str) -> list[torch.Tensor]:
        """The whole parameters or summed gradients of every unit, for checking only (not counted)."""
        if what == "params":
            ts, sharded = self.params, self.kind == "zero3"
        else:  # ZeRO-1's summed gradient exists only as the shard its step consumed
            ts = self.reduced if self.kind == "zero1" else self.grads
            sharded = self.kind != "ddp"
        if not sharded:
            return [t.clone() for t in ts]
        out = []
        for t in ts:
            full = t.new_empty(t.numel() * self.comm.world)
            dist.all_gather(list(full.chunk(self.comm.world)), t)
            out.append(full)
        return out


# --8<-- [start:formulas]
def comm_formula(kind: str, psi: int, world: int, elem_bytes: int) -> float:
    """Bytes each rank sends per step: the ZeRO paper's 2Ψ (DDP, ZeRO-1, ZeRO-2) or 3Ψ (ZeRO-3) elements,
    times (N-1)/N, the ring's exact share (the paper's figures are its large-N limit)."""
    return (3 if kind == "zero3" else 2) * (world - 1) / world * psi * elem_bytes


def memory_formula(kind: str, psi: int, world: int, p: float = 2, g: float = 2, k: float = 12) -> float:
    """Bytes per rank for parameters, gradients, optimizer states of Ψ parameters, p, g, k bytes each per
    parameter (the paper's mixed-precision Adam: 2, 2, 12)."""
    n = world
    return {"ddp": (p + g + k), "zero1": (p + g + k / n), "zero2": (p + (g + k) / n),
            "zero3": (p + g + k) / n}[kind] * psi
# --8<-- [end:formulas]
