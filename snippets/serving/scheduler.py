"""Continuous (iteration-level) batching against static batching, on the tiny decoder with a paged KV cache.

Continuous: every step admits arrived requests while the batch and the KV blocks allow, prefills them, decodes
one token for every running request, retires the finished ones at once, and preempts the newest request
(freeing its blocks; it is recomputed later) when the blocks run out (Orca; vLLM). Static: a batch is formed
from the requests that have arrived, and runs until its longest request finishes; nobody joins mid-way.
Both are greedy, so each request's tokens must be the same under either scheduler."""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from snippets.paged_kv.attention import paged_decode
from snippets.paged_kv.kv_cache import PagedKVCache
from snippets.paged_kv.model import TinyDecoder


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


# --8<-- [start:engine]
class Engine:
    """The tiny decoder over one paged KV cache per layer; all layers share the same block tables."""

    def __init__(self, net: TinyDecoder, num_blocks: int, block_size: int = 16):
        self.net, self.block_size = net, block_size
        dev = net.emb.device
        self.caches = [PagedKVCache(num_blocks, block_size, net.hkv, net.d, torch.float32, dev, prefix_caching=False)
                       for _ in net.layers]

    @property
    def manager(self):
        return self.caches[0].manager

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def prefill(self, rid: int, tokens: list[int]) -> int:
        logits, kvs = self.net.prefill(torch.tensor(tokens, device=self.net.emb.device))
        for cache, (k, v) in zip(self.caches, kvs):
            cache.prefill(rid, tokens, k, v)
        return int(logits.argmax())

    def decode(self, rids: list[int], last: list[int]) -> list[int]:
        """One token for each request; `last` is each one's newest token, not yet in the cache."""
        net, dev = self.net, self.net.emb.device
        pos = torch.tensor([self.manager.lengths[r] for r in rids], device=dev)
        x = net.emb[torch.tensor(last, device=dev)] + net.pos[pos]
        for i, layer in enumerate(net.layers):
            q, k, v = net._qkv(x, layer)
            for b, rid in enumerate(rids):
                self.caches[i].append(rid, last[b], k[b], v[b])
            table, lengths = self.caches[i].block_table(rids)
            x = net._finish(x, paged_decode(q, self.caches[i].k, self.caches[i].v, table, lengths, splits=1), layer)
        logits = torch.nn.functional.rms_norm(x, (x.shape[-1],)) @ net.out
        return logits.argmax(-1).tolist()

    def free(self, rid: int) -> None:
        for cache in self.caches:
            cache.manager.free(rid)
# --8<-- [end:engine]


# --8<-- [start:continuous]
def check_fits(engine: Engine, requests: list[Request]) -> None:
    total = len(engine.manager.allocator.refs)
    for r in requests:
        if engine.blocks_for(len(r.prompt) + r.max_new) > total:
            raise ValueError(f"request {r.rid} needs {engine.blocks_for(len(r.prompt) + r.max_new)} blocks "
                             f"on its own; the cache has {total}")


def run_continuous(engine: Engine, requests: list[Request], max_batch: int, clock=time.perf_counter):
    check_fits(engine, requests)
    start = clock()
    waiting = deque(sorted(requests, key=lambda r: r.arrival))
    running: list[Request] = []
    rec = {r.rid: Record() for r in requests}
    while waiting or running:
        now = clock() - start
        while (waiting and waiting[0].arrival <= now and len(running) < max_batch
               and engine.blocks_for(len(waiting[0].prompt) + len(rec[waiting[0].rid].tokens) + 1)
               <= engine.manager.allocator.num_free):
            req = waiting.popleft()
            r = rec[req.rid]
            r.tokens.append(engine.prefill(req.rid, req.prompt + r.tokens))  # after preemption: recompute
            if np.isnan(r.first):
                r.first = clock() - start
            running.append(req)
        if not running:
            if waiting:
                time.sleep(max(0.0, min(0.001, waiting[0].arrival - now)))
            continue
        for req in [q for q in running if len(rec[q.rid].tokens) >= q.max_new]:
            finish(engine, req, rec, running, clock() - start)
        need = sum(engine.manager.lengths[q.rid] % engine.block_size == 0 for q in running)
        while running and need > engine.manager.allocator.num_free:  # preempt the newest, recompute it later
            victim = running.pop()
            need -= engine.manager.lengths[victim.rid] % engine.block_size == 0
            engine.free(victim.rid)
            rec[victim.rid].preempted += 1
            waiting.appendleft(victim)
        if running:
            new = engine.decode([q.rid for q in running], [rec[q.rid].tokens[-1] for q in running])
            for q, tok in zip(list(running), new):
                rec[q.rid].tokens.append(tok)
                if len(rec[q.rid].tokens) >= q.max_new:
                    finish(engine, q, rec, running, clock() - start)
    return rec, clock() - start


def finish(engine, req, rec, running, now):
    rec[req.rid].tokens = rec[req.rid].tokens[:req.max_new]
    rec[req.rid].done = now
    engine.free(req.rid)
    running.remove(req)
# --8<-- [end:continuous]


# --8<-- [start:static]
def run_static(engine: Engine, requests: list[Request], max_batch: int, clock=time.perf_counter):
    """Static batching reserves room for the whole batch up front: max_batch must fit the cache at full length."""
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
            rec[req.rid].tokens.append(engine.prefill(req.rid, req.prompt))
            rec[req.rid].first = clock() - start
        live = [q for q in batch if q.max_new > 1]
        for q in batch:
            if q.max_new == 1:
                rec[q.rid].done = clock() - start
        while live:  # the whole batch steps together until its longest request is done
            new = engine.decode([q.rid for q in live], [rec[q.rid].tokens[-1] for q in live])
            for q, tok in zip(list(live), new):
                rec[q.rid].tokens.append(tok)
                if len(rec[q.rid].tokens) >= q.max_new:
                    rec[q.rid].done = clock() - start
                    live.remove(q)
        for q in batch:  # blocks are released only when the whole batch is done
            engine.free(q.rid)
    return rec, clock() - start
# --8<-- [end:static]


# --8<-- [start:trace]
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
# --8<-- [end:trace]
