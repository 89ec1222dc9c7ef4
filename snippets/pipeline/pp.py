"""1F1B on real processes: p ranks (gloo, CPU) each hold one stage of an MLP and run their list from
schedules.one_f_one_b, sending activations forward and gradients backward with point-to-point messages. The
accumulated gradients must equal one process's training on the whole batch."""
from __future__ import annotations

import torch
import torch.distributed as dist

from snippets.common import gloo
from snippets.pipeline.schedules import one_f_one_b


def stage_fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, last: bool) -> torch.Tensor:
    h = x @ w + b
    return h if last else torch.tanh(h)


def loss_fn(out: torch.Tensor, y: torch.Tensor, m: int) -> torch.Tensor:
    return ((out - y) ** 2).mean() / m  # the mean over the whole batch, one micro-batch's share


# --8<-- [start:run_1f1b]
def run_stage(rank: int, p: int, m: int, w, b, shape, xs=None, ys=None) -> int:
    """Run device `rank`'s 1F1B list over m micro-batches of `shape`; xs (first stage) and ys (last stage) hold
    them. Sends are non-blocking (a blocking send could wait on a neighbour that is sending too); receives
    block, in the list's order, which the simulator shows cannot deadlock. Gradients accumulate in w.grad and
    b.grad. Returns the peak number of micro-batches whose activations were held."""
    last, held, peak, sends = rank == p - 1, {}, 0, []
    for op in one_f_one_b(p, m)[rank]:
        j = op.mb
        if op.kind == "F":
            if rank == 0:
                inp = xs[j]
            else:
                inp = torch.empty(shape, dtype=w.dtype)
                dist.recv(inp, src=rank - 1, tag=2 * j)  # activation of micro-batch j
                inp.requires_grad_(True)
            out = stage_fn(inp, w, b, last)
            held[j] = (inp, loss_fn(out, ys[j], m) if last else out)
            peak = max(peak, len(held))
            if not last:
                sends.append(dist.isend(out.detach(), dst=rank + 1, tag=2 * j))
        else:
            inp, out = held.pop(j)  # the activations are freed at this micro-batch's backward
            if last:
                out.backward()
            else:
                grad = torch.empty(shape, dtype=w.dtype)
                dist.recv(grad, src=rank + 1, tag=2 * j + 1)  # gradient of micro-batch j
                out.backward(grad)
            if rank > 0:
                sends.append(dist.isend(inp.grad, dst=rank - 1, tag=2 * j + 1))
    for s in sends:
        s.wait()
    return peak
# --8<-- [end:run_1f1b]


def make_problem(seed: int, p: int, m: int, rows: int, dim: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    ws = [torch.randn(dim, dim, generator=g, dtype=torch.float64) / dim**0.5 for _ in range(p)]
    bs = [0.1 * torch.randn(dim, generator=g, dtype=torch.float64) for _ in range(p)]
    x = torch.randn(m * rows, dim, generator=g, dtype=torch.float64)
    y = torch.randn(m * rows, dim, generator=g, dtype=torch.float64)
    return [t.to(dtype) for t in ws], [t.to(dtype) for t in bs], x.to(dtype), y.to(dtype)


def reference_grads(seed: int, p: int, m: int, rows: int, dim: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One process, float64, the whole batch at once: the gradient of the mean squared error."""
    ws, bs, x, y = make_problem(seed, p, m, rows, dim)
    for t in ws + bs:
        t.requires_grad_(True)
    h = x
    for s in range(p):
        h = stage_fn(h, ws[s], bs[s], s == p - 1)
    ((h - y) ** 2).mean().backward()
    return [(w.grad, b.grad) for w, b in zip(ws, bs)]


def _worker(rank, p, cfg):
    torch.set_num_threads(1)
    m, rows, dim = cfg["m"], cfg["rows"], cfg["dim"]
    ws, bs, x, y = make_problem(cfg["seed"], p, m, rows, dim, dtype=torch.float32)
    w, b = ws[rank].requires_grad_(True), bs[rank].requires_grad_(True)
    peak = run_stage(rank, p, m, w, b, (rows, dim), xs=list(x.split(rows)), ys=list(y.split(rows)))
    return {"w_grad": w.grad.clone(), "b_grad": b.grad.clone(), "peak_held": peak}


def run(p: int = 4, m: int = 8, rows: int = 16, dim: int = 64, seed: int = 0) -> dict:
    """Spawn p ranks running 1F1B; returns {rank: {"w_grad", "b_grad", "peak_held"}}."""
    return gloo.spawn(_worker, p, dict(m=m, rows=rows, dim=dim, seed=seed))
