"""Continuous (iteration-level) batching against static batching, on the tiny decoder with a paged KV cache.

Continuous: every step admits arrived requests while the batch and the KV blocks allow, runs one forward over
their prompts (whole, or in chunks under a token budget: chunked prefill) and one decode token of every running
request, retires the finished ones at once, and preempts the newest request (freeing its blocks; it is recomputed
later) when the blocks run out (Orca; vLLM; Sarathi-Serve). Static: a batch is formed from the requests that have
arrived, prefilled together, and decoded until its longest request finishes; nobody joins mid-way.
Both are greedy, so each request's tokens must be the same under either scheduler."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from snippets.inference.paged_kv.attention import paged_decode
from snippets.inference.paged_kv.allocator import BlockManager
from snippets.inference.paged_kv.model import TinyDecoder


@dataclass
class Request:
    rid: int
    arrival: float  # seconds after the start
    prompt: list[int]
    max_new: int


@dataclass
class Record:
    tokens: list[int] = field(default_factory=list)
    first: float = float("nan")  # time of the first output token
    done: float = float("nan")
    preempted: int = 0


class Engine:
    """The tiny decoder over a paged KV cache: one BlockManager (every layer uses the same block tables), one K and
    one V tensor per layer. A step is one forward over every scheduled token, prompt chunks and decode tokens
    together, as vLLM and Sarathi-Serve batch them: each layer runs its matmuls once for the whole step, writes the
    step's K/V with one indexed store, and attends with one paged-kernel launch in which every token, prompt or
    decode, is a query row over its own request's blocks up to its own position. So a step costs the same launches
    whatever it holds. graphs=True (CUDA): the forward is captured once per padded token count (powers of two, as
    vLLM pads decode batches) and a step replays it, one launch instead of a few hundred; padded rows read and
    write a block of their own."""

    def __init__(self, net: TinyDecoder, num_blocks: int, block_size: int = 16, graphs: bool = False):
        self.net, self.block_size, self.num_blocks = net, block_size, num_blocks
        shape = (len(net.layers), num_blocks + 1, block_size, net.hkv, net.d)  # + the padded rows' block
        self.k = torch.zeros(shape, device=net.emb.device)
        self.v = torch.zeros(shape, device=net.emb.device)
        self.width = self.blocks_for(net.pos.shape[0])  # table columns of the longest sequence
        self.graphs = {} if graphs else None
        self.reset()

    def reset(self) -> None:
        """An empty cache (the K/V tensors and captured graphs are kept: a token reads only what it wrote)."""
        self.manager = BlockManager(self.num_blocks, self.block_size, prefix_caching=False)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def admit(self, rid: int, tokens: list[int]) -> None:
        """Reserve the blocks of a whole prompt (raises OutOfBlocks, changing nothing, if they are not free)."""
        self.manager.add(rid, tokens)

    def step(self, chunks: list[tuple[int, int, int]], decodes: list[tuple[int, int]]) -> tuple[dict, list[int]]:
        """chunks: (rid, lo, hi) = prompt positions [lo, hi) of admitted requests; decodes: (rid, newest token, not
        yet cached). Returns ({rid: next token} for each chunk that ends its prompt, [next token] per decode).
        The step's inputs are built as numpy columns, a chunk at a time, not token by token in Python: the host's
        cost per step then hardly grows with the tokens it holds."""
        bs, m = self.block_size, self.manager
        cols = []  # per chunk, then the decodes: rows token, position, block, offset, owner
        for n, (rid, lo, hi) in enumerate(chunks):
            pos = np.arange(lo, hi)
            cols.append(np.stack([np.asarray(m.tokens[rid][lo:hi]), pos, np.asarray(m.tables[rid])[pos // bs],
                                  pos % bs, np.full_like(pos, n)]))
        ends = np.cumsum([hi - lo for _, lo, hi in chunks], dtype=np.int64)
        dec = []
        for n, (rid, last) in enumerate(decodes, len(chunks)):
            pos = m.lengths[rid]
            slot = m.append(rid, last)
            dec.append((last, pos, slot.block, slot.offset, n))
        cols.append(np.array(dec, dtype=np.int64).reshape(-1, 5).T)
        inputs = np.ascontiguousarray(np.concatenate(cols, axis=1))
        tables = [m.tables[rid] for rid, *_ in chunks] + [m.tables[rid] for rid, _ in decodes]
        table = np.full((len(tables), max(len(t) for t in tables)), self.num_blocks, dtype=np.int32)
        for row, t in zip(table, tables):
            row[:len(t)] = t
        nxt = self._eager(inputs, table) if self.graphs is None else self._replay(inputs, table)
        done = [(rid, int(end) - 1) for (rid, lo, hi), end in zip(chunks, ends) if hi == len(m.tokens[rid])]
        first_decode = int(ends[-1]) if chunks else 0
        return {rid: nxt[r] for rid, r in done}, nxt[first_decode:]

    def free(self, rid: int) -> None:
        self.manager.free(rid)

# --8<-- [start:engine]
    def _forward(self, idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        """idx [5, tokens] (token, position, block, offset, owner), table [requests, pages]: the next token of each."""
        net = self.net
        blocks, offsets, lengths = idx[2], idx[3], (idx[1] + 1).int()  # a token sees keys up to its own position
        table = table[idx[4]]  # a row per token
        x = net.emb[idx[0]] + net.pos[idx[1]]
        for i, layer in enumerate(net.layers):
            q, k, v = net._qkv(x, layer)
            self.k[i, blocks, offsets], self.v[i, blocks, offsets] = k, v
            x = net._finish(x, paged_decode(q, self.k[i], self.v[i], table, lengths, splits=1), layer)
        return (torch.nn.functional.rms_norm(x, (x.shape[-1],)) @ net.out).argmax(-1)
# --8<-- [end:engine]

    def _eager(self, inputs: np.ndarray, table: np.ndarray) -> list[int]:
        dev = self.k.device
        return self._forward(torch.from_numpy(inputs).to(dev), torch.from_numpy(table).to(dev)).tolist()

    def _replay(self, inputs: np.ndarray, table: np.ndarray) -> list[int]:
        n = inputs.shape[1]
        size = max(16, 1 << (n - 1).bit_length())
        if size not in self.graphs:
            self.graphs[size] = self._capture(size)
        idx, tab, out, graph = self.graphs[size]
        padded = np.empty((5, size), dtype=np.int64)
        padded[:, :n] = inputs
        padded[:, n:] = np.array([0, 0, self.num_blocks, 0, size - 1])[:, None]  # owner: the last table row
        full = np.full((size, self.width), self.num_blocks, dtype=np.int32)
        full[:len(table), :table.shape[1]] = table
        idx.copy_(torch.from_numpy(padded))
        tab.copy_(torch.from_numpy(full))
        graph.replay()
        return out[:n].tolist()

    def _capture(self, size: int):
        dev, pad = self.k.device, self.num_blocks
        idx = torch.zeros((5, size), dtype=torch.int64, device=dev)
        idx[2], idx[4] = pad, size - 1
        tab = torch.full((size, self.width), pad, dtype=torch.int32, device=dev)
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):  # compile and warm up outside the capture
            for _ in range(2):
                self._forward(idx, tab)
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self._forward(idx, tab)
        return idx, tab, out, graph


def check_fits(engine: Engine, requests: list[Request]) -> None:
    total = len(engine.manager.allocator.refs)
    for r in requests:
        if engine.blocks_for(len(r.prompt) + r.max_new) > total:
            raise ValueError(f"request {r.rid} needs {engine.blocks_for(len(r.prompt) + r.max_new)} blocks "
                             f"on its own; the cache has {total}")


def run_continuous(engine: Engine, requests: list[Request], max_batch: int, clock=time.perf_counter,
                   chunk: int | None = None):
    """Iteration-level scheduling. chunk: at most this many tokens per step (decode tokens first, then prompt
    chunks: chunked prefill); None: whole prompts."""
    check_fits(engine, requests)
    start = clock()
    waiting = deque(sorted(requests, key=lambda r: r.arrival))
    running: list[Request] = []
    filled: dict[int, int] = {}  # prompt tokens in the cache so far, for requests still prefilling
    rec = {r.rid: Record() for r in requests}
    while waiting or running:
        now = clock() - start
        while (waiting and waiting[0].arrival <= now and len(running) < max_batch
               and engine.blocks_for(len(waiting[0].prompt) + len(rec[waiting[0].rid].tokens) + 1)
               <= engine.manager.allocator.num_free):
            req = waiting.popleft()
            engine.admit(req.rid, req.prompt + rec[req.rid].tokens)  # after preemption: recompute
            filled[req.rid] = 0
            running.append(req)
        if not running:
            if waiting:
                time.sleep(max(0.0, min(0.001, waiting[0].arrival - now)))
            continue
        decoding = [q for q in running if q.rid not in filled]
        need = sum(engine.manager.lengths[q.rid] % engine.block_size == 0 for q in decoding)
        while need > engine.manager.allocator.num_free:  # preempt the newest, recompute it later
            victim = running.pop()
            if victim.rid in filled:
                del filled[victim.rid]
            else:
                need -= engine.manager.lengths[victim.rid] % engine.block_size == 0
                decoding.remove(victim)
            engine.free(victim.rid)
            rec[victim.rid].preempted += 1
            waiting.appendleft(victim)
        budget = float("inf") if chunk is None else max(chunk - len(decoding), 1)  # a prompt always moves on
        chunks = []
        for q in running:
            if q.rid in filled and budget > 0:
                lo = filled[q.rid]
                hi = min(len(engine.manager.tokens[q.rid]), lo + int(min(budget, 1 << 30)))
                chunks.append((q.rid, lo, hi))
                budget -= hi - lo
        firsts, new = engine.step(chunks, [(q.rid, rec[q.rid].tokens[-1]) for q in decoding])
        for rid, lo, hi in chunks:
            filled[rid] = hi
        for rid, tok in firsts.items():
            del filled[rid]
            rec[rid].tokens.append(tok)
            if np.isnan(rec[rid].first):
                rec[rid].first = clock() - start
        for q, tok in zip(decoding, new):
            rec[q.rid].tokens.append(tok)
        for q in [q for q in running if q.rid not in filled and len(rec[q.rid].tokens) >= q.max_new]:
            finish(engine, q, rec, running, clock() - start)
    return rec, clock() - start


def finish(engine, req, rec, running, now):
    rec[req.rid].tokens = rec[req.rid].tokens[:req.max_new]
    rec[req.rid].done = now
    engine.free(req.rid)
    running.remove(req)


def run_static(engine: Engine, requests: list[Request], max_batch: int, clock=time.perf_counter):
    """A batch is formed from the requests that have arrived, prefilled in one step, then decoded together until
    its longest request is done; its blocks are released only then. max_batch must fit the cache at full length."""
    check_fits(engine, requests)
    start = clock()
    waiting = deque(sorted(requests, key=lambda r: r.arrival))
    rec = {r.rid: Record() for r in requests}
    while waiting:
        now = clock() - start
        if waiting[0].arrival > now:
            time.sleep(max(0.0, min(0.001, waiting[0].arrival - now)))
            continue
        batch = []
        while waiting and waiting[0].arrival <= now and len(batch) < max_batch:
            batch.append(waiting.popleft())
        for req in batch:
            engine.admit(req.rid, req.prompt)
        firsts, _ = engine.step([(q.rid, 0, len(q.prompt)) for q in batch], [])
        for q in batch:
            rec[q.rid].tokens.append(firsts[q.rid])
            rec[q.rid].first = clock() - start
            if q.max_new == 1:
                rec[q.rid].done = rec[q.rid].first
        live = [q for q in batch if q.max_new > 1]
        while live:  # the whole batch steps together until its longest request is done
            _, new = engine.step([], [(q.rid, rec[q.rid].tokens[-1]) for q in live])
            for q, tok in zip(list(live), new):
                rec[q.rid].tokens.append(tok)
                if len(rec[q.rid].tokens) >= q.max_new:
                    rec[q.rid].done = clock() - start
                    live.remove(q)
        for q in batch:
            engine.free(q.rid)
    return rec, clock() - start


def trace(n: int, rate: float, seed: int = 0, vocab: int = 256, prompt_median: int = 64, out_median: int = 32,
          max_len: int = 512) -> list[Request]:
    """Poisson arrivals at `rate` per second; log-normal prompt and output lengths (a long tail, as in chat)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, n)) if rate > 0 else np.zeros(n)
    prompts = np.clip(np.exp(rng.normal(np.log(prompt_median), 0.8, n)).astype(int), 1, max_len // 2)
    outs = np.clip(np.exp(rng.normal(np.log(out_median), 0.9, n)).astype(int), 1, max_len // 2)
    return [Request(i, float(arrivals[i]), rng.integers(0, vocab, int(prompts[i])).tolist(), int(outs[i]))
            for i in range(n)]


def metrics(rec: dict[int, Record], requests: list[Request], seconds: float) -> dict:
    """Output tokens per second, time to first token and time per output token (p50, p99)."""
    arrival = {r.rid: r.arrival for r in requests}
    ttft = [r.first - arrival[i] for i, r in rec.items()]
    tpot = [(r.done - r.first) / (len(r.tokens) - 1) for r in rec.values() if len(r.tokens) > 1]
    tokens = sum(len(r.tokens) for r in rec.values())
    return {"tokens_per_s": tokens / seconds, "ttft_p50": float(np.percentile(ttft, 50)),
            "ttft_p99": float(np.percentile(ttft, 99)), "tpot_p50": float(np.percentile(tpot, 50)),
            "tpot_p99": float(np.percentile(tpot, 99)), "seconds": seconds, "tokens": tokens,
            "preemptions": sum(r.preempted for r in rec.values())}


# --8<-- [start:bound]
def step_bound(requests: list[Request], max_batch: int, step_s: float) -> dict:
    """What scheduling alone can gain on this trace: continuous against static batching if every step took step_s
    seconds whatever it held (the engine's cost per step set aside; KV memory taken as ample). A short trace ends
    in a tail where the last long requests run nearly alone, and that tail caps the ratio."""
    def run(static: bool) -> float:
        waiting, live, t = deque(sorted(requests, key=lambda r: r.arrival)), [], 0.0
        while waiting or live:
            if not live and waiting[0].arrival > t:
                t = waiting[0].arrival
            if static:  # one step gives every first token, then the batch steps until its longest request is done
                batch = []
                while waiting and waiting[0].arrival <= t and len(batch) < max_batch:
                    batch.append(waiting.popleft())
                t += step_s * max(r.max_new for r in batch)
            else:  # requests join whenever a slot is free and leave as soon as they are done
                while waiting and waiting[0].arrival <= t and len(live) < max_batch:
                    live.append(waiting.popleft().max_new)
                t += step_s
                live = [n - 1 for n in live if n > 1]
        return t

    continuous, static = run(False), run(True)
    return {"continuous_s": continuous, "static_s": static, "ratio": static / continuous}
# --8<-- [end:bound]
