"""Inference-time expert offload: every expert's weights live in pinned host memory, and a layer's chosen experts
are copied to the GPU when it needs them (on demand), or guessed one layer ahead and copied on a side stream while
the current layer computes (prefetch: the next layer's router applied to the current hidden state, as in
Mixtral-offloading and Pre-gated MoE). Misses are copied on demand. The output equals the all-resident model's:
the same weights, the same kernels."""
from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F

from snippets.common.timing import timed_call


class OffloadedMoE:
    """`layers` MoE FFN layers (residual) with `experts` experts each, top-k sigmoid routing."""

    def __init__(self, layers=4, experts=8, dim=512, ffn=1024, k=2, device="cpu", dtype=torch.bfloat16, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.k, self.device, self.cuda = k, torch.device(device), torch.device(device).type == "cuda"
        self.routers = [(torch.randn(dim, experts, generator=g) / dim**0.5).to(device) for _ in range(layers)]
        pin = self.cuda  # page-locked memory lets the copy engine read it while the SMs compute

        def host(*shape):
            w = (torch.randn(*shape, generator=g) / shape[0] ** 0.5).to(dtype)
            return w.pin_memory() if pin else w
        self.host = [[(host(dim, ffn), host(ffn, dim)) for _ in range(experts)] for _ in range(layers)]
        # two layers' worth of GPU slots: layer l computes from slots[l % 2] while l + 1 fills the other
        slot = lambda rows, cols: torch.empty(rows, cols, dtype=dtype, device=device)  # noqa: E731
        self.slots = [[(slot(dim, ffn), slot(ffn, dim)) for _ in range(experts)] for _ in range(2)]
        self.resident = None
        self.expert_bytes = 2 * dim * ffn * torch.empty((), dtype=dtype).element_size()

    def make_resident(self) -> None:
        self.resident = [[(a.to(self.device), b.to(self.device)) for a, b in layer] for layer in self.host]

    def route(self, x, layer):
        scores = torch.sigmoid(x.float() @ self.routers[layer])
        chosen = scores.topk(self.k, -1).indices
        gates = scores.gather(-1, chosen)
        return chosen, (gates / gates.sum(-1, keepdim=True)).to(x.dtype)

    def _ffn(self, x, chosen, gates, weights, needed):
        y = torch.zeros_like(x)
        for e in needed:
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            w1, w2 = weights[e]
            y.index_add_(0, rows, gates[rows, slot, None] * (F.gelu(x[rows] @ w1) @ w2))
        return x + y

    def _copy(self, layer, experts, stream=None):
        dst = self.slots[layer % 2]
        with torch.cuda.stream(stream) if stream is not None else nullcontext():
            for e in experts:
                for d, s in zip(dst[e], self.host[layer][e]):
                    d.copy_(s, non_blocking=True)

    def forward(self, x: torch.Tensor, mode: str = "prefetch") -> tuple[torch.Tensor, dict]:
        """mode: 'resident' (all weights on the GPU), 'on_demand', or 'prefetch'. Returns (y, stats)."""
        if mode not in ("resident", "on_demand", "prefetch"):
            raise ValueError(f"unknown mode {mode!r}")
        if mode == "resident" and self.resident is None:
            raise RuntimeError("call make_resident() first")
        side = torch.cuda.Stream(self.device) if self.cuda and mode == "prefetch" else None
        stats = {"copied": 0, "prefetched": 0, "hits": 0}
        ready, guessed, done = None, set(), None  # the prefetch of this layer: event, experts, slots free again
        for layer in range(len(self.host)):
            chosen, gates = self.route(x, layer)
            needed = chosen.unique().tolist()  # the host waits for the router: it must know what to copy
            if mode == "resident":
                x = self._ffn(x, chosen, gates, self.resident[layer], needed)
                continue
            if mode == "prefetch" and layer + 1 < len(self.host):  # guess the next layer's experts now
                nxt = set(self.route(x, layer + 1)[0].unique().tolist())
                next_ready = None
                if side is not None:
                    if done is not None:
                        side.wait_event(done)  # layer - 1, which used these slots, has finished computing
                    next_ready = torch.cuda.Event()
                self._copy(layer + 1, sorted(nxt), side)
                if next_ready is not None:
                    next_ready.record(side)
                stats["prefetched"] += len(nxt)
            missing = [e for e in needed if e not in guessed]
            stats["hits"] += len(needed) - len(missing)
            self._copy(layer, missing)  # on demand, on the compute stream
            stats["copied"] += len(missing)
            if ready is not None:
                torch.cuda.current_stream().wait_event(ready)
            x = self._ffn(x, chosen, gates, self.slots[layer % 2], needed)
            if self.cuda:
                done = torch.cuda.Event()
                done.record()
            if mode == "prefetch" and layer + 1 < len(self.host):
                ready, guessed = next_ready, nxt
        return x, stats


def compare(model: OffloadedMoE, tokens: int, reps: int = 5, seed: int = 0) -> dict:
    """Each mode on the same fresh input: output equal to resident's, median seconds per forward, copy stats."""
    if model.resident is None:
        model.make_resident()
    g = torch.Generator().manual_seed(seed)
    dim = model.routers[0].shape[0]
    x = torch.randn(tokens, dim, generator=g).to(model.device, model.host[0][0][0].dtype)
    out = {}
    ref = None
    for mode in ("resident", "on_demand", "prefetch"):
        times = []
        for _ in range(reps + 1):  # the first is a warm-up
            (y, stats), seconds = timed_call(lambda: model.forward(x, mode), x.device)
            times.append(seconds)
        if ref is None:
            ref = y
        elif not torch.equal(y, ref):
            raise AssertionError(f"{mode}: output differs from the all-resident model's")
        times = sorted(times[1:])
        copied = stats["copied"] + stats["prefetched"]
        hit_rate = stats["hits"] / max(stats["hits"] + stats["copied"], 1) if mode == "prefetch" else None
        out[mode] = {"ms": 1e3 * times[len(times) // 2], "experts_copied": copied, "hit_rate": hit_rate,
                     "gb_copied": copied * model.expert_bytes / 1e9}
    return out
