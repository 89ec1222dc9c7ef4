"""KV memory a cache reserves but never fills, for a set of request lengths: paged blocks against reserving
the maximum length for every request up front (what a contiguous cache without paging must do)."""
from __future__ import annotations

import numpy as np


# --8<-- [start:waste]
def request_lengths(n: int, seed: int = 0, max_len: int = 4096) -> np.ndarray:
    """Prompt + output tokens of n requests: log-normal around a few hundred tokens with a long tail, capped at
    max_len, the shape of chat traces such as ShareGPT (median of a few hundred, some in the thousands)."""
    rng = np.random.default_rng(seed)
    lengths = np.exp(rng.normal(np.log(400), 0.9, n)).astype(int)
    return np.clip(lengths, 1, max_len)


def paged_waste(lengths: np.ndarray, block_size: int) -> float:
    """Fraction of reserved slots left empty: only the last block of each request is partly empty."""
    reserved = (-(-lengths // block_size) * block_size).sum()
    return float((reserved - lengths.sum()) / reserved)


def contiguous_waste(lengths: np.ndarray, max_len: int) -> float:
    """Fraction of reserved slots left empty when every request reserves max_len slots."""
    reserved = len(lengths) * max_len
    return float((reserved - lengths.sum()) / reserved)
# --8<-- [end:waste]
