"""One training step of snippets/memory/model.py as large-model trainers run it: bf16 weights and gradients,
fp32 master weights and Adam moments, updated a slice at a time so that the optimizer adds no
model-sized temporaries. measure() records what the CUDA caching allocator saw at each phase."""
from __future__ import annotations

import torch
from snippets.memory.model import Config, Decoder, loss_fn

CHUNK = 1 << 24  # elements per optimizer slice


# --8<-- [start:master]
class MasterAdam:
    """Adam on fp32 master copies of bf16 weights: 2 (weights) + 2 (gradients) + 4 + 4 + 4 bytes per parameter."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
        self.params = [p for p in params if p.requires_grad]
        self.master = [p.detach().float() for p in self.params]
        self.m = [torch.zeros_like(w) for w in self.master]
        self.v = [torch.zeros_like(w) for w in self.master]
        self.lr, self.betas, self.eps, self.wd, self.t = lr, betas, eps, weight_decay, 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        (b1, b2), lr = self.betas, self.lr
        bc1, bc2 = 1 - b1**self.t, 1 - b2**self.t
        for p, w, m, v in zip(self.params, self.master, self.m, self.v):
            for sl in zip(*(x.view(-1).split(CHUNK) for x in (p, p.grad, w, m, v))):
                pc, gc, wc, mc, vc = sl
                g = gc.float()
                mc.lerp_(g, 1 - b1)
                vc.mul_(b2).addcmul_(g, g, value=1 - b2)
                wc.mul_(1 - lr * self.wd).addcdiv_(mc, (vc / bc2).sqrt_().add_(self.eps), value=-lr / bc1)
                pc.copy_(wc)

    def zero_grad(self):
        for p in self.params:
            p.grad = None
# --8<-- [end:master]


def measure(c: Config, batch: int, seq: int, recompute: str = "none", device: str = "cuda", seed: int = 0) -> dict:
    """Allocated bytes at each phase of the second training step (the first creates the optimizer states)."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = Decoder(c).to(torch.bfloat16)
    opt = MasterAdam(model.parameters())
    tokens = torch.randint(0, c.vocab, (batch, seq + 1), device=device)
    out = {}
    for step in range(2):
        opt.zero_grad()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        loss = loss_fn(model, tokens, recompute)
        after_fwd = torch.cuda.memory_allocated()
        loss.backward()
        after_bwd, peak_bwd = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
        opt.step()
        torch.cuda.synchronize()
        out = {"states": before, "activations": after_fwd - before, "after_backward": after_bwd,
               "peak": torch.cuda.max_memory_allocated(), "peak_backward": peak_bwd, "loss": loss.item(),
               "reserved_peak": torch.cuda.max_memory_reserved()}
    del model, opt, loss
    torch.cuda.empty_cache()
    return out


def saved_bytes(model: Decoder, tokens: torch.Tensor, recompute: str = "none") -> int:
    """Bytes autograd keeps for backward after one forward pass, counted by storage (views share one), weights
    excluded: the activation memory on any device, CPU included."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        seen.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(model, tokens, recompute)
    loss.backward()  # frees what was saved
    return sum(n for ptr, n in seen.items() if ptr not in weights)


def fits(c: Config, batch: int, seq: int, recompute: str, free_bytes: int) -> bool:
    """Whether the estimate leaves a tenth of the free memory spare: how the lab picks what a smaller GPU runs."""
    from snippets.memory.estimate import training_peak

    return training_peak(c, batch, seq, recompute).peak < 0.9 * free_bytes
