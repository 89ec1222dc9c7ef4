"""The K/V tensors behind a BlockManager: [num_blocks, block_size, kv_heads, head_dim] each, written at the
slots the manager hands out, read back through block tables."""
from __future__ import annotations

import torch

from snippets.inference.paged_kv.allocator import BlockManager, Slot


class PagedKVCache:
    def __init__(self, num_blocks: int, block_size: int, kv_heads: int, head_dim: int, dtype=torch.bfloat16,
                 device="cpu", prefix_caching: bool = True):
        self.manager = BlockManager(num_blocks, block_size, prefix_caching)
        shape = (num_blocks, block_size, kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    def _write(self, slot: Slot, k: torch.Tensor, v: torch.Tensor) -> None:
        if slot.copy_from is not None:  # copy-on-write: the shared prefix of the block first
            self.k[slot.block, :slot.copy_slots] = self.k[slot.copy_from, :slot.copy_slots]
            self.v[slot.block, :slot.copy_slots] = self.v[slot.copy_from, :slot.copy_slots]
        self.k[slot.block, slot.offset] = k
        self.v[slot.block, slot.offset] = v

    def prefill(self, seq: int, tokens: list[int], k: torch.Tensor, v: torch.Tensor) -> int:
        """Store a prompt's K/V ([len, kv_heads, head_dim]); returns how many leading tokens were already cached."""
        slots, cached = self.manager.add(seq, tokens)
        if slots:
            blocks = torch.tensor([s.block for s in slots], device=self.k.device)
            offsets = torch.tensor([s.offset for s in slots], device=self.k.device)
            self.k[blocks, offsets] = k[cached:].to(self.k.dtype)
            self.v[blocks, offsets] = v[cached:].to(self.v.dtype)
        return cached

    def append(self, seq: int, token: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store one decoded token's K/V ([kv_heads, head_dim])."""
        self._write(self.manager.append(seq, token), k.to(self.k.dtype), v.to(self.v.dtype))

    def block_table(self, seqs: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(int32 [batch, max blocks] padded with 0, int32 [batch] lengths) for the kernels."""
        tables = [self.manager.tables[s] for s in seqs]
        width = max(len(t) for t in tables)
        bt = torch.zeros((len(seqs), width), dtype=torch.int32)
        for i, t in enumerate(tables):
            bt[i, :len(t)] = torch.tensor(t, dtype=torch.int32)
        lens = torch.tensor([self.manager.lengths[s] for s in seqs], dtype=torch.int32)
        return bt.to(self.k.device), lens.to(self.k.device)

    def gather(self, seq: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A sequence's K and V as contiguous [len, kv_heads, head_dim] (the reference's view)."""
        table = torch.tensor(self.manager.tables[seq], device=self.k.device)
        n = self.manager.lengths[seq]
        return (self.k[table].flatten(0, 1)[:n], self.v[table].flatten(0, 1)[:n])
