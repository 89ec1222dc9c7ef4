"""A paged KV cache's bookkeeping, in the style of vLLM: fixed-size blocks, one block table per sequence,
a free list, reference counts, copy-on-write for forked sequences, and prefix sharing by hashing full blocks.

Pure Python, no tensors: `BlockManager` decides where each token's K/V goes; `kv_cache.PagedKVCache` moves
the data. Every operation that needs blocks checks there are enough before it changes anything, so an
`OutOfBlocks` error leaves every table as it was (the caller preempts a sequence and retries).
"""
from __future__ import annotations

from dataclasses import dataclass


class OutOfBlocks(RuntimeError):
    """Not enough free blocks; nothing was changed."""

    def __init__(self, needed: int, free: int):
        super().__init__(f"needs {needed} free block(s), {free} left")
        self.needed, self.free = needed, free


class CacheStateError(RuntimeError):
    """A block freed twice, a freed block used, or an unknown sequence."""


class BlockAllocator:
    """Physical blocks with reference counts; a block is free exactly when its count is 0."""

    def __init__(self, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.refs = [0] * num_blocks
        self._free = list(range(num_blocks - 1, -1, -1))  # a stack: block 0 is handed out first

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        if not self._free:
            raise OutOfBlocks(1, 0)
        block = self._free.pop()
        self.refs[block] = 1
        return block

    def share(self, block: int) -> None:
        if self.refs[block] == 0:
            raise CacheStateError(f"block {block} is free: it cannot be shared")
        self.refs[block] += 1

    def release(self, block: int) -> bool:
        """Drop one reference; True when the block became free."""
        if self.refs[block] == 0:
            raise CacheStateError(f"block {block} is already free (double free)")
        self.refs[block] -= 1
        if self.refs[block] == 0:
            self._free.append(block)
            return True
        return False


@dataclass(frozen=True)
class Slot:
    """Where one token's K/V lives, and a copy the caller must do first (copy-on-write), if any."""
    block: int
    offset: int
    copy_from: int | None = None  # copy slots [0, offset) of this block into `block` before writing
    copy_slots: int = 0


class BlockManager:
    """Block tables for many sequences over one BlockAllocator."""

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.allocator = BlockAllocator(num_blocks)
        self.block_size = block_size
        self.prefix_caching = prefix_caching
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}
        self.tokens: dict[int, list[int]] = {}
        self._hash_of: dict[int, int] = {}  # full, shared-able block -> hash of its prefix
        self._block_of: dict[int, int] = {}  # hash of a prefix -> block holding its last block of tokens

    def _seq(self, seq: int) -> list[int]:
        if seq not in self.tables:
            raise CacheStateError(f"unknown sequence {seq} (never added, or freed)")
        return self.tables[seq]

    def _chain(self, tokens: list[int]) -> list[int]:
        """Hash of each full block together with everything before it: equal hashes, equal prefixes."""
        hashes, h, bs = [], 0, self.block_size
        for i in range(len(tokens) // bs):
            h = hash((h, tuple(tokens[i * bs:(i + 1) * bs])))
            hashes.append(h)
        return hashes

    def add(self, seq: int, tokens: list[int]) -> tuple[list[Slot], int]:
        """Add a sequence with its prompt. Returns the slots of the tokens to write and how many leading tokens
        are already cached (full blocks shared with another sequence's identical prefix)."""
        if seq in self.tables:
            raise CacheStateError(f"sequence {seq} already exists")
        bs = self.block_size
        hashes = self._chain(tokens) if self.prefix_caching else []
        reused = []
        for h in hashes:
            if h not in self._block_of:
                break
            reused.append(self._block_of[h])
        needed = -(-len(tokens) // bs) - len(reused)
        if needed > self.allocator.num_free:
            raise OutOfBlocks(needed, self.allocator.num_free)
        for block in reused:
            self.allocator.share(block)
        table = list(reused) + [self.allocator.allocate() for _ in range(needed)]
        for i in range(len(reused), len(hashes)):  # new full blocks become shareable
            self._register(table[i], hashes[i])
        self.tables[seq], self.lengths[seq], self.tokens[seq] = table, len(tokens), list(tokens)
        cached = len(reused) * bs
        return [Slot(table[t // bs], t % bs) for t in range(cached, len(tokens))], cached

    def append(self, seq: int, token: int) -> Slot:
        """Room for one more token: a new block when the last is full; a private copy when it is shared."""
        table = self._seq(seq)
        n, bs = self.lengths[seq], self.block_size
        if n % bs == 0:
            if self.allocator.num_free < 1:
                raise OutOfBlocks(1, 0)
            table.append(self.allocator.allocate())
            slot = Slot(table[-1], 0)
        elif self.allocator.refs[table[-1]] > 1:  # copy-on-write: a forked sequence writes into a shared block
            if self.allocator.num_free < 1:
                raise OutOfBlocks(1, 0)
            old = table[-1]
            table[-1] = self.allocator.allocate()
            self.allocator.release(old)
            slot = Slot(table[-1], n % bs, copy_from=old, copy_slots=n % bs)
        else:
            slot = Slot(table[-1], n % bs)
        self.lengths[seq] = n + 1
        self.tokens[seq].append(token)
        if self.prefix_caching and (n + 1) % bs == 0:
            self._register(table[-1], self._chain(self.tokens[seq])[-1])
        return slot

    def fork(self, parent: int, child: int) -> None:
        """The child shares every block of the parent (parallel sampling, beam search)."""
        table = self._seq(parent)
        if child in self.tables:
            raise CacheStateError(f"sequence {child} already exists")
        for block in table:
            self.allocator.share(block)
        self.tables[child], self.lengths[child] = list(table), self.lengths[parent]
        self.tokens[child] = list(self.tokens[parent])

    def free(self, seq: int) -> None:
        """Release a finished or preempted sequence's blocks."""
        for block in self._seq(seq):
            if self.allocator.release(block) and block in self._hash_of:
                del self._block_of[self._hash_of.pop(block)]
        del self.tables[seq], self.lengths[seq], self.tokens[seq]

    def _register(self, block: int, h: int) -> None:
        if h not in self._block_of and block not in self._hash_of:
            self._block_of[h], self._hash_of[block] = block, h
