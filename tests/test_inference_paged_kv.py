"""snippets/inference/paged_kv on the CPU: the block manager's invariants under random operation sequences (hypothesis),
its typed errors, the waste accounting, and the Triton decode kernel (interpreter) against an fp32 reference
over block sizes, group sizes, lengths that are not multiples of the block size, and split counts."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from snippets.common.checks import fresh_seed
from snippets.inference.paged_kv import attention as pa
from snippets.inference.paged_kv import waste
from snippets.inference.paged_kv.allocator import BlockManager, CacheStateError, OutOfBlocks
from snippets.inference.paged_kv.kv_cache import PagedKVCache

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning")]


def check_invariants(m: BlockManager):
    """Every block's count equals the tables holding it; free blocks are exactly those with count 0; each table
    has just enough blocks for its length; shareable hashes point at live blocks."""
    count = [0] * len(m.allocator.refs)
    for seq, table in m.tables.items():
        assert len(table) == -(-m.lengths[seq] // m.block_size), seq
        assert len(m.tokens[seq]) == m.lengths[seq]
        for block in table:
            count[block] += 1
    assert count == m.allocator.refs
    assert sorted(m.allocator._free) == [b for b, c in enumerate(count) if c == 0]
    for h, block in m._block_of.items():
        assert count[block] > 0 and m._hash_of[block] == h


OPS = st.lists(st.tuples(st.sampled_from(["add", "append", "fork", "free"]), st.integers(0, 7),
                         st.integers(0, 40), st.integers(0, 3)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, block_size=st.sampled_from([1, 2, 4, 16]), num_blocks=st.integers(1, 24))
def test_random_operations_keep_the_tables_consistent_and_the_contents_right(ops, block_size, num_blocks):
    """Apply random add/append/fork/free to a PagedKVCache whose 'K' is each token's id, and to a plain dict of
    lists; after every step the invariants hold and every sequence reads back exactly its tokens."""
    cache = PagedKVCache(num_blocks, block_size, 1, 1, dtype=torch.float64)
    mirror: dict[int, list[int]] = {}
    next_id = 100
    for op, seq, n, vocab in ops:
        live = sorted(mirror)
        try:
            if op == "add" and seq not in mirror:
                tokens = [t % (vocab + 1) for t in range(n)]  # small vocabularies repeat prefixes: sharing happens
                if not tokens:
                    continue
                kv = torch.tensor(tokens, dtype=torch.float64).view(-1, 1, 1)
                cache.prefill(seq, tokens, kv, kv)
                mirror[seq] = tokens
            elif op == "append" and live:
                s = live[seq % len(live)]
                tok = n % (vocab + 1)
                kv = torch.tensor([[tok]], dtype=torch.float64)
                cache.append(s, tok, kv, kv)
                mirror[s].append(tok)
            elif op == "fork" and live:
                s = live[seq % len(live)]
                cache.manager.fork(s, next_id)
                mirror[next_id] = list(mirror[s])
                next_id += 1
            elif op == "free" and live:
                s = live[seq % len(live)]
                cache.manager.free(s)
                del mirror[s]
        except OutOfBlocks:
            pass  # the caller would preempt; nothing may have changed
        check_invariants(cache.manager)
        assert sorted(cache.manager.tables) == sorted(mirror)
        for s, tokens in mirror.items():
            k, v = cache.gather(s)
            assert k.flatten().tolist() == tokens and v.flatten().tolist() == tokens, s


def test_out_of_blocks_changes_nothing():
    m = BlockManager(num_blocks=3, block_size=4)
    m.add(0, list(range(8)))  # two blocks
    before = (dict(m.tables), dict(m.lengths), list(m.allocator.refs), m.allocator.num_free)
    with pytest.raises(OutOfBlocks) as e:
        m.add(1, list(range(100, 109)))  # needs three
    assert (e.value.needed, e.value.free) == (3, 1)
    assert (dict(m.tables), dict(m.lengths), list(m.allocator.refs), m.allocator.num_free) == before
    m.add(2, [7])
    with pytest.raises(OutOfBlocks):
        m.append(0, 9)  # block 2 of seq 0 would be a fourth block
    assert m.lengths[0] == 8 and len(m.tables[0]) == 2


def test_fork_then_write_copies_the_shared_block():
    m = BlockManager(num_blocks=8, block_size=4, prefix_caching=False)
    m.add(0, [1, 2, 3, 4, 5, 6])  # blocks [0, 1], block 1 half full
    m.fork(0, 1)
    assert m.tables[1] == m.tables[0] and m.allocator.refs[1] == 2
    slot = m.append(1, 7)
    assert slot.copy_from == 1 and slot.copy_slots == 2 and slot.offset == 2
    assert m.tables[1][0] == 0 and m.tables[1][1] != 1 and m.allocator.refs[1] == 1
    assert m.append(0, 8).copy_from is None  # the parent now owns block 1 alone


def test_prefix_sharing_reuses_full_blocks_only():
    m = BlockManager(num_blocks=16, block_size=4)
    _, cached = m.add(0, list(range(10)))
    assert cached == 0
    slots, cached = m.add(1, list(range(9)) + [99, 98])
    assert cached == 8 and m.tables[1][:2] == m.tables[0][:2] and m.tables[1][2] != m.tables[0][2]
    assert [s.block for s in slots] == [m.tables[1][2]] * 3
    _, cached = m.add(2, [0, 1, 2, 5] + list(range(4, 10)))  # differs in block 0: nothing shared
    assert cached == 0
    m.free(0)
    m.free(1)
    _, cached = m.add(3, list(range(10)))  # freed blocks are not kept as a cache
    assert cached == 0


def test_misuse_is_caught():
    m = BlockManager(num_blocks=4, block_size=2)
    m.add(0, [1, 2, 3])
    with pytest.raises(CacheStateError, match="already exists"):
        m.add(0, [1])
    m.free(0)
    with pytest.raises(CacheStateError, match="unknown sequence 0"):
        m.free(0)
    with pytest.raises(CacheStateError, match="unknown sequence 0"):
        m.append(0, 5)
    with pytest.raises(CacheStateError, match="double free"):
        m.allocator.release(0)
    with pytest.raises(CacheStateError, match="is free"):
        m.allocator.share(1)


def test_waste_against_hand_counts_and_the_vllm_shape():
    lengths = np.array([5])
    assert waste.paged_waste(lengths, 4) == pytest.approx(3 / 8)
    assert waste.contiguous_waste(lengths, 10) == pytest.approx(5 / 10)
    lengths = waste.request_lengths(5000, seed=1, max_len=4096)
    assert waste.paged_waste(lengths, 16) < 0.04 < 0.5 < waste.contiguous_waste(lengths, 4096)


def random_paged(batch, lengths, page, kv_heads, dim, dtype, g):
    pages = [-(-n // page) for n in lengths]
    total = sum(pages) + 3
    perm = torch.randperm(total, generator=g)  # blocks scattered over the pool, as after many allocations
    table = torch.zeros((batch, max(pages)), dtype=torch.int32)
    i = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[i:i + n].int()
        i += n
    k = torch.randn(total, page, kv_heads, dim, generator=g).to(dtype)
    v = torch.randn(total, page, kv_heads, dim, generator=g).to(dtype)
    return k, v, table, torch.tensor(lengths, dtype=torch.int32)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)], ids=["fp32", "bf16"])
@pytest.mark.parametrize("page, group, lengths, splits", [
    (16, 4, [1, 17, 40], None), (16, 1, [33], 3), (32, 8, [100, 5], 2), (64, 2, [64, 130, 1], None),
    (128, 4, [129], 1), (16, 4, [300, 2], 7)])
def test_decode_matches_reference(page, group, lengths, splits, dtype, tol):
    seed = fresh_seed()
    g = torch.Generator().manual_seed(seed)
    kv_heads, dim = 2, 32
    k, v, table, lens = random_paged(len(lengths), lengths, page, kv_heads, dim, dtype, g)
    q = torch.randn(len(lengths), kv_heads * group, dim, generator=g).to(dtype)
    out = pa.paged_decode(q, k, v, table, lens, splits=splits, tile_tokens=32)
    ref = pa.decode_ref(q, k, v, table, lens)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    assert torch.isfinite(out).all() and err < tol, f"seed {seed}: relative error {err}"


def test_choose_splits_fills_the_gpu_but_keeps_a_tile_per_split():
    assert pa.choose_splits(1, 8, 2048, 4, 132) == 33
    assert pa.choose_splits(64, 8, 2048, 4, 132) == 1
    assert pa.choose_splits(1, 8, 3, 4, 132) == 1  # a short context has one tile: no split


def test_decode_rejects_bad_shapes():
    q = torch.randn(1, 6, 32)
    k = torch.randn(2, 16, 4, 32)
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        pa.paged_decode(q, k, k, torch.zeros(1, 1, dtype=torch.int32), torch.tensor([3], dtype=torch.int32))


def test_tiny_model_generates_the_same_tokens_three_ways():
    from snippets.inference.paged_kv import model as tiny

    net = tiny.TinyDecoder(max_len=64, seed=3)
    prompt = torch.randint(0, 256, (21,), generator=torch.Generator().manual_seed(5)).tolist()
    a = tiny.generate_no_cache(net, prompt, 6)
    assert a == tiny.generate_contiguous(net, prompt, 6) == tiny.generate_paged(net, prompt, 6, block_size=4)
    assert len(a) == 6 and all(0 <= t < 256 for t in a)


def test_bench_layouts_and_check():
    from snippets.inference.paged_kv import bench

    _, _, table, lens = bench.make_cache(3, 40, 16, 2, 32, torch.float32, "cpu", layout="sequential")
    assert table.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]] and lens.tolist() == [40, 40, 40]
    _, _, table, _ = bench.make_cache(3, 40, 16, 2, 32, torch.float32, "cpu", layout="scattered", seed=1)
    assert sorted(table.flatten().tolist()) == list(range(9))
    assert bench.kv_bytes([40, 40], 2, 32, 2, 4) == 80 * 2 * 32 * 2 * 2 + 2 * 2 * 4 * 32 * 2
    ref = torch.randn(10)
    with pytest.raises(AssertionError, match="wrong"):
        bench.check("wrong", ref + 1, ref, 1e-3)
