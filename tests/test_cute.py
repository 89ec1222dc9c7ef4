"""snippets/cute/layout.py: CuTe's layout algebra in pure Python.

The worked examples come from CUTLASS's CuTe documentation, read at commit 7107b05 of NVIDIA/cutlass
(media/docs/cpp/cute/01_layout.md "CuTe Layouts" and 02_layout_algebra.md "CuTe Layout Algebra"); each test
names the document and section. The property tests check the post-conditions that document states.
"""
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from snippets.cute.layout import (ComposedLayout, Layout, Swizzle, bank, coalesce, complement, composition,
                                  conflict_ways, cosize, crd2idx, flatten, idx2crd, logical_divide,
                                  logical_product, make_layout, make_layout_tv, owner, raked_product,
                                  right_inverse, size, tiled_divide, zipped_divide)


def values(layout, n=None):
    return [layout(i) for i in range(size(layout) if n is None else n)]


def same_function(a, b, n=None):
    return values(a, n) == values(b, n)


# ---------------------------------------------------------------- 01_layout.md

def test_layout_left_strides():
    # 01_layout.md, "Constructing a Layout": omitted strides are LayoutLeft (generalised column-major)
    assert repr(Layout((2, 4))) == "(2,4):(1,2)"
    assert repr(Layout((2, (2, 2)))) == "(2,(2,2)):(1,(2,4))"


def test_print2d_and_print1d():
    # 01_layout.md, "Using a Layout": print2D and print1D of s2xs4, s2xd4_a and s2xh4
    s2xh4 = Layout((2, (2, 2)), (4, (2, 1)))
    assert [[s2xh4(m, n) for n in range(4)] for m in range(2)] == [[0, 2, 1, 3], [4, 6, 5, 7]]
    assert values(s2xh4) == [0, 4, 2, 6, 1, 5, 3, 7]
    assert values(Layout((2, 4), (12, 1))) == [0, 12, 1, 13, 2, 14, 3, 15]
    assert values(Layout((2, 4))) == list(range(8))


def test_vector_layouts():
    # 01_layout.md, "Vector Layouts": ((4,2)):((2,1)) and ((4,2)):((1,4))
    assert values(Layout(((4, 2),), ((2, 1),))) == [0, 2, 4, 6, 1, 3, 5, 7]
    assert values(Layout(((4, 2),), ((1, 4),))) == list(range(8))


def test_matrix_with_multimode():
    # 01_layout.md, "Matrix examples": ((2,2),2):((4,1),2) is a 4x2 matrix
    a = Layout(((2, 2), 2), ((4, 1), 2))
    assert [[a(m, n) for n in range(2)] for m in range(4)] == [[0, 2], [4, 6], [1, 3], [5, 7]]


def test_coordinate_mapping_table():
    # 01_layout.md, "Coordinate Mapping": the 1-D, 2-D and natural coordinates of shape (3,(2,3))
    shape = (3, (2, 3))
    assert idx2crd(16, shape) == (1, (1, 2))
    assert idx2crd(9, shape) == (0, (1, 1))
    assert [idx2crd(i, shape) for i in (0, 4, 8)] == [(0, (0, 0)), (1, (1, 0)), (2, (0, 1))]


def test_index_mapping():
    # 01_layout.md, "Index Mapping": (3,(2,3)):(3,(12,1)); crd2idx of 16, (1,5) and (1,(1,2)) is 17
    shape, stride = (3, (2, 3)), (3, (12, 1))
    assert crd2idx(16, shape, stride) == crd2idx((1, 5), shape, stride) == crd2idx((1, (1, 2)), shape, stride) == 17
    a = Layout(shape, stride)
    assert [[a(i, j) for j in range(6)] for i in range(3)] == [
        [0, 12, 1, 13, 2, 14], [3, 15, 4, 16, 5, 17], [6, 18, 7, 19, 8, 20]]


def test_cosize_and_sublayouts():
    # 01_layout.md, "Layout Creation and Use" (cosize = A(size-1)+1) and "Sublayouts"
    a = Layout((4, (3, 6)))
    assert repr(a) == "(4,(3,6)):(1,(4,12))" and repr(a[1]) == "(3,6):(4,12)" and repr(a[1][1]) == "6:12"
    assert cosize(Layout((2, 4), (12, 1))) == 16
    assert repr(make_layout(Layout(3, 1), Layout(4, 3))) == "(3,4):(1,3)"


# ---------------------------------------------------------------- 02_layout_algebra.md

def test_coalesce_examples():
    # 02_layout_algebra.md, "Coalesce" and "By-mode Coalesce"
    a = Layout((2, (1, 6)), (1, (6, 2)))
    assert repr(coalesce(a)) == "12:1"
    assert repr(coalesce(a, (1, 1))) == "(2,6):(1,2)"


def test_composition_example():
    # 02_layout_algebra.md, "Composition": (6,2):(8,2) o (4,3):(3,1) = ((2,2),3):((24,2),8), and R(0..11)
    a, b = Layout((6, 2), (8, 2)), Layout((4, 3), (3, 1))
    r = composition(a, b)
    assert repr(r) == "((2,2),3):((24,2),8)"
    assert values(r) == [0, 24, 2, 26, 8, 32, 10, 34, 16, 40, 18, 42]


def test_composition_reshape_examples():
    # 02_layout_algebra.md, "Computing Composition", Examples 2 and 3, and the 16:9 divide/mod example
    assert repr(composition(Layout(20, 2), Layout((5, 4), (4, 1)))) == "(5,4):(8,2)"
    assert repr(composition(Layout((10, 2), (16, 4)), Layout((5, 4), (1, 5)))) == "(5,(2,2)):(16,(80,4))"
    w, x, y, z = 1, 5, 100, 1000  # (3,6,2,8):(w,x,y,z) o 16:9 = (1,2,2,4):(9w,3x,y,z); the size-1 mode drops
    assert repr(composition(Layout((3, 6, 2, 8), (w, x, y, z)), Layout(16, 9))) == f"(2,2,4):({3 * x},{y},{z})"


def test_by_mode_composition():
    # 02_layout_algebra.md, "By-mode Composition": a tiler <3:4, 8:2>, and a shape (3,8) as tiler
    a = Layout((12, (4, 8)), (59, (13, 1)))
    assert repr(composition(a, (Layout(3, 4), Layout(8, 2)))) == "(3,(2,4)):(236,(26,1))"
    assert repr(composition(a, (3, 8))) == "(3,(4,2)):(59,(13,1))"


def test_complement_examples():
    # 02_layout_algebra.md, "Complement Examples"
    cases = [(Layout(4, 1), "6:4"), (Layout(6, 4), "4:1"), (Layout((4, 6), (1, 4)), "1:0"),
             (Layout(4, 2), "(2,3):(1,8)"), (Layout((2, 4), (1, 6)), "3:2"),
             (Layout((2, 2), (1, 6)), "(3,2):(2,12)")]
    for a, expected in cases:
        assert repr(complement(a, 24)) == expected, a


def test_logical_divide_1d():
    # 02_layout_algebra.md, "Logical Divide 1-D Example": (4,2,3):(2,1,8) / 4:2
    assert repr(complement(Layout(4, 2), 24)) == "(2,3):(1,8)"
    assert repr(logical_divide(Layout((4, 2, 3), (2, 1, 8)), Layout(4, 2))) == "((2,2),(2,3)):((4,1),(2,8))"


def test_logical_divide_2d_and_zipped_tiled():
    # 02_layout_algebra.md, "Logical Divide 2-D Example" and "Zipped, Tiled, Flat Divides":
    # A = (9,(4,8)):(59,(13,1)), B = <3:3, (2,4):(1,8)>
    a, tiler = Layout((9, (4, 8)), (59, (13, 1))), (Layout(3, 3), Layout((2, 4), (1, 8)))
    ld = logical_divide(a, tiler)
    assert [[size(m[0]), size(m[1])] for m in ld.modes()] == [[3, 3], [8, 4]]  # shape ((3,3),(8,4))
    assert repr(make_layout(ld[0][0], ld[1][0])) == "(3,(2,4)):(177,(13,2))"  # the tile, = composition
    zd = zipped_divide(a, tiler)
    assert [size(m) for m in zd[0].modes()] == [3, 8] and [size(m) for m in zd[1].modes()] == [3, 4]
    assert same_function(zd[0], composition(a, tiler))  # layout<0>(zipped_divide(a, b)) == composition(a, b)
    td = tiled_divide(a, tiler)
    assert len(td) == 3 and same_function(td[0], zd[0])
    assert sorted(values(zd)) == sorted(values(a))  # a permutation of A's elements


def test_logical_product_1d():
    # 02_layout_algebra.md, "Logical Product 1-D Example": (2,2):(4,1) x 6:1, and B = (4,2):(2,1)
    a = Layout((2, 2), (4, 1))
    assert repr(complement(a, 24)) == "(2,3):(2,8)"
    assert repr(logical_product(a, Layout(6, 1))) == "((2,2),(2,3)):((4,1),(2,8))"
    p = logical_product(a, Layout((4, 2), (2, 1)))
    assert size(p[1]) == 8 and sorted(values(p)) == list(range(32))


# ---------------------------------------------------------------- properties (hypothesis)

POW2 = st.sampled_from([1, 2, 4, 8])


@st.composite
def nested(draw, leaves):
    """Group a flat list of leaves into a nested tuple (depth up to 2), keeping their order."""
    leaves, out, i = list(leaves), [], 0
    while i < len(leaves):
        k = draw(st.integers(1, len(leaves) - i))
        out.append(leaves[i] if k == 1 else tuple(leaves[i:i + k]))
        i += k
    return out[0] if len(out) == 1 and not isinstance(out[0], tuple) else tuple(out)


@st.composite
def layouts(draw, shape_st=POW2, stride_st=st.integers(0, 40), max_modes=4):
    n = draw(st.integers(1, max_modes))
    shapes = draw(st.lists(shape_st, min_size=n, max_size=n))
    strides = draw(st.lists(stride_st, min_size=n, max_size=n))
    return _nest(draw, shapes, strides)


def _nest(draw, shapes, strides):
    pairs = draw(nested(list(zip(shapes, strides))))
    return Layout(_map(pairs, 0), _map(pairs, 1))


def _map(p, i):
    """Pick element i of every (shape, stride) leaf of a nested structure of pairs."""
    if isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, int) for x in p):
        return p[i]
    return tuple(_map(q, i) for q in p)


@st.composite
def injective_pow2(draw, max_modes=4):
    """A one-to-one layout with power-of-two shapes and strides: modes placed in a random order, with
    random power-of-two gaps between them."""
    n = draw(st.integers(1, max_modes))
    shapes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=n, max_size=n))
    order = draw(st.permutations(range(n)))
    gaps = draw(st.lists(st.sampled_from([1, 1, 2, 4]), min_size=n, max_size=n))
    strides, cur = [0] * n, 1
    for k, g in zip(order, gaps):
        cur *= g
        strides[k] = cur
        cur *= shapes[k]
    return _nest(draw, shapes, strides)


def injective(layout):
    vals = values(layout)
    return len(set(vals)) == len(vals)


@settings(max_examples=300, deadline=None)
@given(layouts(shape_st=st.integers(1, 6), stride_st=st.integers(0, 30)))
def test_coalesce_preserves_the_function(a):
    # 02_layout_algebra.md, "Coalesce": size kept, depth <= 1, result(i) == layout(i) for i < size
    c = coalesce(a)
    assert size(c) == size(a) and same_function(c, a)
    assert not isinstance(c.shape, tuple) or all(isinstance(s, int) for s in c.shape)


@settings(max_examples=400, deadline=None)
@given(layouts(), injective_pow2())
def test_composition_is_function_composition(a, b):
    # 02_layout_algebra.md, "Composition": for all i < size(B), (A o B)(i) == A(B(i)); B's codomain may go
    # past size(A), where A's last mode runs on (CuTe's crd2idx)
    r = composition(a, b)
    assert size(r) == size(b)
    assert values(r) == [a(b(i)) for i in range(size(b))]


@settings(max_examples=300, deadline=None)
@given(layouts(shape_st=st.integers(1, 6), stride_st=st.integers(0, 12)),
       layouts(shape_st=st.integers(1, 6), stride_st=st.integers(0, 12), max_modes=3))
def test_composition_never_silently_wrong(a, b):
    # with any integers: either a ValueError (a divisibility condition fails) or the right function
    assume(injective(b))
    try:
        r = composition(a, b)
    except ValueError:
        return
    assert values(r) == [a(b(i)) for i in range(size(b))]


@settings(max_examples=300, deadline=None)
@given(injective_pow2(), st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256, 512]))
def test_complement_is_disjoint_and_covers(a, m):
    # 02_layout_algebra.md, "Complement": R is ordered, A and R have disjoint images, and for a power-of-two
    # cotarget at least A's span, (A, R) is one-to-one onto [0, cotarget)
    r = complement(a, m)
    rv = values(r)
    assert all(x < y for x, y in zip(rv, rv[1:]))
    assert not set(values(a)) & set(rv[1:])
    span = max([s * d for s, d in zip(flatten(a.shape), flatten(a.stride)) if s > 1], default=1)
    if m >= span:
        assert sorted(values(make_layout(a, r))) == list(range(m))


@settings(max_examples=200, deadline=None)
@given(layouts(shape_st=st.integers(1, 6), stride_st=st.integers(0, 20)), st.integers(1, 200))
def test_complement_postconditions_general(a, m):
    # 02_layout_algebra.md, "Complement" post-conditions, any integers: R ordered, disjoint from A,
    # cosize((A, R)) >= size(cotarget)
    assume(injective(a))
    try:
        r = complement(a, m)
    except ValueError:
        return
    rv = values(r)
    assert all(x < y for x, y in zip(rv, rv[1:])) and not set(values(a)) & set(rv[1:])
    assert cosize(make_layout(a, r)) >= m and injective(make_layout(a, r))


@settings(max_examples=200, deadline=None)
@given(injective_pow2(), injective_pow2(max_modes=2))
def test_logical_divide_is_a_permutation(a, b):
    # 02_layout_algebra.md, "Division": A / B = A o (B, B*) keeps A's elements, mode 0 = A o B
    assume(size(a) % max(cosize(b), 1) == 0 and cosize(b) <= size(a))
    ld = logical_divide(a, b)
    assert same_function(ld[0], composition(a, b))
    assert sorted(values(ld)) == sorted(values(a))


# ---------------------------------------------------------------- the page's walk-throughs

def test_tv_layout_of_a_128_thread_copy():
    # 128 threads in a (32,4) row-major grid, each copying 1x8 contiguous values: a 32x32 tile
    # (the pattern of make_tiled_copy in examples/cute/tutorial/sgemm_sm80.cu, at 32x32)
    tv, tile = make_layout_tv(Layout((32, 4), (4, 1)), Layout((1, 8)))
    assert tile == (32, 32) and repr(tv) == "((4,32),8):((256,1),32)"
    assert sorted(values(tv)) == list(range(1024))  # every element held exactly once
    for t in (0, 1, 4, 127):
        assert [divmod(tv(t, v), 32)[::-1] for v in range(8)] == [(t // 4, 8 * (t % 4) + v) for v in range(8)]
    assert owner(tv, tile, 31, 31) == (127, 7) and owner(tv, tile, 1, 8) == (5, 0)
    offsets = composition(Layout((32, 32), (32, 1)), tv)  # a row-major bf16 tile in memory
    assert repr(offsets) == "((4,32),8):((8,32),1)"  # each thread's 8 values: one 16-byte vector
    assert repr(coalesce(offsets[1])) == "8:1"


def test_raked_product_and_right_inverse():
    lmn = raked_product(Layout((32, 4), (4, 1)), Layout((1, 8)))
    assert all(lmn(m, n) == (4 * m + n // 8) + 128 * (n % 8) for m in range(32) for n in range(32))
    inv = right_inverse(lmn)
    assert all(lmn(inv(i)) == i for i in range(size(inv)))


def test_swizzle_functor():
    sw = Swizzle(3, 3, 3)
    assert sw(0b111_000_101) == 0b111_111_101 and sw(0b001_010_000) == 0b001_011_000
    assert sorted(sw(i) for i in range(512)) == list(range(512))  # a permutation of each 512-element block
    assert all(sw(sw(i)) == i for i in range(4096))


def test_swizzle_333_removes_bank_conflicts():
    # Swizzle<3,3,3> over an 8x64 row-major bf16 tile (as in test/unit/cute/ampere/cooperative_copy.cu)
    plain = Layout((8, 64), (64, 1))
    swz = ComposedLayout(Swizzle(3, 3, 3), plain)
    assert [bank(plain(r, 0)) for r in range(8)] == [0] * 8
    assert [bank(swz(r, 0)) for r in range(8)] == [0, 4, 8, 12, 16, 20, 24, 28]
    for chunk in range(8):  # 8 rows x one 16-byte chunk, as ldmatrix reads an 8x8 matrix
        col = [(r, 8 * chunk) for r in range(8)]
        assert conflict_ways(plain, col) == 8 and conflict_ways(swz, col) == 1
    for r in range(8):  # a row's 16-byte writes stay conflict-free and each chunk stays contiguous
        assert conflict_ways(swz, [(r, 8 * c) for c in range(8)]) == 1
        assert all(swz(r, 8 * c + i) == swz(r, 8 * c) + i for c in range(8) for i in range(8))
