"""A tiny decoder with random weights (fixed seed, nothing downloaded) that generates greedily three ways:
recomputing the whole prefix every step (no cache), with a contiguous KV cache, and with the paged cache read
by the Triton decode kernel. The three must produce the same tokens."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from snippets.inference.paged_kv.attention import paged_decode
from snippets.inference.paged_kv.kv_cache import PagedKVCache


class TinyDecoder:
    def __init__(self, vocab=256, dim=128, layers=2, q_heads=4, kv_heads=2, max_len=4096, seed=0, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        self.hq, self.hkv, self.d = q_heads, kv_heads, dim // q_heads

        def w(*shape):
            return (torch.randn(*shape, generator=g) / shape[0] ** 0.5).to(device)

        self.emb, self.pos, self.out = w(vocab, dim) * dim**0.5, w(max_len, dim), w(dim, vocab)
        self.layers = [dict(q=w(dim, dim), k=w(dim, kv_heads * self.d), v=w(dim, kv_heads * self.d), o=w(dim, dim),
                            up=w(dim, 4 * dim), down=w(4 * dim, dim)) for _ in range(layers)]

    def _qkv(self, x, layer):
        h = F.rms_norm(x, (x.shape[-1],))
        n = x.shape[0]
        return ((h @ layer["q"]).view(n, self.hq, self.d), (h @ layer["k"]).view(n, self.hkv, self.d),
                (h @ layer["v"]).view(n, self.hkv, self.d))

    def _finish(self, x, attn, layer):
        x = x + attn.reshape(x.shape[0], -1) @ layer["o"]
        return x + F.gelu(F.rms_norm(x, (x.shape[-1],)) @ layer["up"]) @ layer["down"]

    def prefill(self, tokens):
        """Logits of the last position, and each layer's K and V ([n, kv_heads, d]) for the cache."""
        x = self.emb[tokens] + self.pos[:len(tokens)]
        kvs = []
        for layer in self.layers:
            q, k, v = self._qkv(x, layer)
            attn = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                                  is_causal=True, enable_gqa=True).transpose(0, 1)
            kvs.append((k, v))
            x = self._finish(x, attn, layer)
        return F.rms_norm(x[-1], (x.shape[-1],)) @ self.out, kvs

    def step(self, token: int, pos: int, attend):
        """One new token; attend(i, q, k, v) stores layer i's k, v and returns attention over the whole prefix."""
        x = self.emb[token][None] + self.pos[pos][None]
        for i, layer in enumerate(self.layers):
            q, k, v = self._qkv(x, layer)
            x = self._finish(x, attend(i, q, k, v), layer)
        return F.rms_norm(x[0], (x.shape[-1],)) @ self.out


def generate_no_cache(model: TinyDecoder, prompt: list[int], steps: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(steps):
        logits, _ = model.prefill(torch.tensor(tokens, device=model.emb.device))
        tokens.append(int(logits.argmax()))
    return tokens[len(prompt):]


def generate_contiguous(model: TinyDecoder, prompt: list[int], steps: int) -> list[int]:
    logits, kvs = model.prefill(torch.tensor(prompt, device=model.emb.device))
    cache = [[k, v] for k, v in kvs]

    def attend(i, q, k, v):
        cache[i][0], cache[i][1] = torch.cat([cache[i][0], k]), torch.cat([cache[i][1], v])
        kk, vv = cache[i][0].transpose(0, 1), cache[i][1].transpose(0, 1)
        return F.scaled_dot_product_attention(q.transpose(0, 1), kk, vv, enable_gqa=True).transpose(0, 1)

    out = []
    for pos in range(len(prompt), len(prompt) + steps):
        out.append(int(logits.argmax()))
        logits = model.step(out[-1], pos, attend)
    return out


def generate_paged(model: TinyDecoder, prompt: list[int], steps: int, block_size: int = 16) -> list[int]:
    blocks = len(model.layers) * (-(-(len(prompt) + steps) // block_size))
    caches = [PagedKVCache(blocks, block_size, model.hkv, model.d, torch.float32, model.emb.device)
              for _ in model.layers]
    logits, kvs = model.prefill(torch.tensor(prompt, device=model.emb.device))
    for cache, (k, v) in zip(caches, kvs):
        cache.prefill(0, prompt, k, v)
    out = []

    def attend(i, q, k, v):
        caches[i].append(0, out[-1], k[0], v[0])
        table, lengths = caches[i].block_table([0])
        return paged_decode(q, caches[i].k, caches[i].v, table, lengths)

    for pos in range(len(prompt), len(prompt) + steps):
        out.append(int(logits.argmax()))
        logits = model.step(out[-1], pos, attend)
    return out
