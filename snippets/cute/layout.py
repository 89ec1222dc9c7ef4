"""CuTe layouts as plain Python: a Layout is a (shape, stride) pair of nested int tuples, and a function from
coordinates to indices.

Written from the definitions in CUTLASS's CuTe documentation (media/docs/cpp/cute/01_layout.md,
02_layout_algebra.md) and the post-conditions its unit tests check. All integers behave like CuTe's static
integers: size-1 modes are dropped where CuTe would drop a static _1. The divisibility conditions are checked
strictly (a ValueError where the result would not be the function composition), so a result this module
returns is always correct as a function.

The 1-D coordinate of a hierarchical shape is colexicographic (the leftmost mode varies fastest), and the
last mode takes whatever is left over, so a layout is defined for every integer, as in CuTe's crd2idx.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

# ---------------------------------------------------------------- integer tuples


def flatten(t) -> tuple:
    return tuple(x for e in t for x in flatten(e)) if isinstance(t, tuple) else (t,)


def size(t) -> int:
    """The number of coordinates: the product of a shape, or of a layout's shape."""
    t = t.shape if isinstance(t, (Layout, ComposedLayout)) else t
    return prod(flatten(t))


def unwrap(t):
    return unwrap(t[0]) if isinstance(t, tuple) and len(t) == 1 else t


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def compact_left(shape, start: int = 1):
    """Column-major (CuTe's LayoutLeft) strides: an exclusive prefix product, ignoring the hierarchy."""
    if not isinstance(shape, tuple):
        return start
    out = []
    for s in shape:
        out.append(compact_left(s, start))
        start *= size(s)
    return tuple(out)


def idx2crd(idx: int, shape):
    """The natural (hierarchical) coordinate of a 1-D index, colexicographically; the last mode is unbounded."""
    if not isinstance(shape, tuple):
        return idx
    crd = []
    for i, s in enumerate(shape):
        if i == len(shape) - 1:
            crd.append(idx2crd(idx, s))
        else:
            idx, rem = divmod(idx, size(s))
            crd.append(idx2crd(rem, s))
    return tuple(crd)


def crd2idx(crd, shape, stride) -> int:
    """Any coordinate compatible with the shape (1-D, by mode, or natural) to an index: the inner product with
    the strides of its natural coordinate."""
    if isinstance(crd, tuple):
        if not isinstance(shape, tuple) or len(crd) != len(shape):
            raise ValueError(f"coordinate {crd} does not fit shape {shape}")
        return sum(crd2idx(c, s, d) for c, s, d in zip(crd, shape, stride))
    if isinstance(shape, tuple):
        out = 0
        for i, (s, d) in enumerate(zip(shape, stride)):
            if i == len(shape) - 1:
                return out + crd2idx(crd, s, d)
            crd, rem = divmod(crd, size(s))
            out += crd2idx(rem, s, d)
    return crd * stride


def _congruent(a, b) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_congruent, a, b))
    return not isinstance(b, tuple)


def _fmt(t) -> str:
    return "(" + ",".join(map(_fmt, t)) + ")" if isinstance(t, tuple) else str(t)


# ---------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    shape: object
    stride: object = None

    def __post_init__(self):
        if self.stride is None:
            object.__setattr__(self, "stride", compact_left(self.shape))
        if not _congruent(self.shape, self.stride):
            raise ValueError(f"shape {self.shape} and stride {self.stride} are not congruent")

    def __call__(self, *crd) -> int:
        return crd2idx(crd[0] if len(crd) == 1 else crd, self.shape, self.stride)

    def __getitem__(self, i: int) -> Layout:
        """Mode i (a rank-1 layout is its own mode 0)."""
        if not isinstance(self.shape, tuple):
            if i != 0:
                raise IndexError(i)
            return self
        return Layout(self.shape[i], self.stride[i])

    def __len__(self) -> int:
        return len(self.shape) if isinstance(self.shape, tuple) else 1

    def __repr__(self) -> str:
        return f"{_fmt(self.shape)}:{_fmt(self.stride)}"

    def modes(self) -> list[Layout]:
        return [self[i] for i in range(len(self))]


def make_layout(*layouts: Layout) -> Layout:
    """Concatenation: (A, B, ...) as one layout whose modes are the arguments."""
    return Layout(tuple(a.shape for a in layouts), tuple(a.stride for a in layouts))


def cosize(layout: Layout) -> int:
    """The size of the codomain: layout(size - 1) + 1 (01_layout.md)."""
    return layout(size(layout) - 1) + 1


def _bw_coalesce(shapes, strides, keep_last: bool) -> Layout:
    """Merge adjacent flat modes from the right: skip size-1 modes, join s0:d0 ++ s1:s0*d0 into s0*s1:d0."""
    last_s, last_d = shapes[-1], strides[-1]
    if keep_last and last_s == 1:
        last_s = 2  # keep the stride of an unbounded size-1 last mode (CuTe's coalesce_x)
    new_s, new_d = [last_s], [last_d]
    for s, d in zip(reversed(shapes[:-1]), reversed(strides[:-1])):
        if s == 1:
            continue
        if new_s[0] == 1:
            new_s[0], new_d[0] = s, d
        elif s * d == new_d[0]:
            new_s[0], new_d[0] = s * new_s[0], d
        else:
            new_s.insert(0, s)
            new_d.insert(0, d)
    if new_s == [1]:
        return Layout(1, 0)
    return Layout(unwrap(tuple(new_s)), unwrap(tuple(new_d)))


def coalesce(layout: Layout, profile=None) -> Layout:
    """The same function on [0, size) with as few modes as possible; with a profile, coalesce mode by mode."""
    if isinstance(profile, tuple):
        modes = layout.modes()
        return make_layout(*[coalesce(m, p) for m, p in zip(modes, profile)], *modes[len(profile):])
    return _bw_coalesce(flatten(layout.shape), flatten(layout.stride), keep_last=False)


# --8<-- [start:composition]
def _compose(lshape, lstride, shape: int, stride: int) -> Layout:
    """A o s:d, A flat and coalesced: every d-th element of A (d divided out from the left), then the first s."""
    if stride == 0:
        return Layout(shape, 0)
    if not isinstance(lshape, tuple):
        return Layout(shape, stride * lstride)
    out_s, out_d = [], []
    for cs, cd in zip(lshape[:-1], lstride[:-1]):
        if stride % cs and cs % stride:
            raise ValueError(f"stride divisibility: {stride} vs mode size {cs}")
        next_shape, next_stride = ceil_div(cs, stride), ceil_div(stride, cs)
        if next_shape != 1 and shape != 1:
            new = min(next_shape, shape)
            if shape % new:
                raise ValueError(f"shape divisibility: {shape} vs {new}")
            out_s.append(new)
            out_d.append(stride * cd)
            shape //= new
        stride = next_stride
    if shape != 1 or not out_s:
        out_s.append(shape)
        out_d.append(stride * lstride[-1])
    return Layout(unwrap(tuple(out_s)), unwrap(tuple(out_d)))


def composition(a: Layout, b) -> Layout:
    """R = A o B, R(c) = A(B(c)) for every coordinate c of B. B may be a layout, an int n (n:1) or a
    tuple of those (a tiler, applied mode by mode; modes of A beyond it are kept)."""
    if isinstance(b, tuple):
        modes = a.modes()
        return make_layout(*[composition(m, t) for m, t in zip(modes, b)], *modes[len(b):])
    b = Layout(b) if isinstance(b, int) else b
    flat = _bw_coalesce(flatten(a.shape), flatten(a.stride), keep_last=True)

    def rec(s, d):  # distribute over B's modes
        if isinstance(s, tuple):
            return make_layout(*[rec(si, di) for si, di in zip(s, d)])
        return _compose(flat.shape, flat.stride, s, d)
    return _verified(a, b, rec(b.shape, b.stride))
# --8<-- [end:composition]


def _verified(a: Layout, b: Layout, r: Layout) -> Layout:
    """R, after checking R(i) == A(B(i)) for every i: B's modes can meet A's across a mode boundary in a
    way the divisibility conditions above do not see, and then no layout is the composition."""
    if any(r(i) != a(b(i)) for i in range(size(b))):
        raise ValueError(f"{a} o {b} is no layout: A(B(i)) is not a sum over B's modes")
    return r


# --8<-- [start:complement]
def complement(a: Layout, cotarget=None) -> Layout:
    """R such that (A, R) is one-to-one onto [0, cotarget) (rounded up): R fills the holes between A's
    modes, sorted by stride, then repeats the whole up to the cotarget. R's strides increase."""
    m = size(cotarget) if cotarget is not None else cosize(a)
    modes = sorted((d, s) for s, d in zip(flatten(a.shape), flatten(a.stride)) if s != 1 and d != 0)
    out_s, out_d, cur = [], [], 1
    for d, s in modes:
        if d < cur or d % cur:
            raise ValueError(f"{a} is not injective or not complementable (stride {d} after {cur})")
        out_s.append(d // cur)
        out_d.append(cur)
        cur = d * s
    out_s.append(ceil_div(m, cur))
    out_d.append(cur)
    return coalesce(Layout(tuple(out_s), tuple(out_d)))


def logical_divide(a: Layout, tiler) -> Layout:
    """A / B = A o (B, B*): mode 0 is the tile B selects, mode 1 walks over the tiles."""
    if isinstance(tiler, tuple):
        modes = a.modes()
        return make_layout(*[logical_divide(m, t) for m, t in zip(modes, tiler)], *modes[len(tiler):])
    b = Layout(tiler) if isinstance(tiler, int) else tiler
    return composition(a, make_layout(b, complement(b, size(a))))


def logical_product(a: Layout, tiler) -> Layout:
    """A x B = (A, A* o B): mode 0 is A, mode 1 places copies of A as B orders them."""
    if isinstance(tiler, tuple):
        modes = a.modes()
        return make_layout(*[logical_product(m, t) for m, t in zip(modes, tiler)], *modes[len(tiler):])
    b = Layout(tiler) if isinstance(tiler, int) else tiler
    return make_layout(a, composition(complement(a, size(a) * cosize(b)), b))
# --8<-- [end:complement]


def zipped_divide(a: Layout, tiler) -> Layout:
    """((tile modes), (rest modes, other modes of A)): tile k is zd(0..., k)."""
    ld = logical_divide(a, tiler)
    if not isinstance(tiler, tuple):
        return ld
    n = len(tiler)
    modes = ld.modes()
    return make_layout(make_layout(*[m[0] for m in modes[:n]]),
                       make_layout(*[m[1] for m in modes[:n]], *modes[n:]))


def tiled_divide(a: Layout, tiler) -> Layout:
    """((tile modes), rest_0, rest_1, ..., other modes of A)."""
    zd = zipped_divide(a, tiler)
    return make_layout(zd[0], *zd[1].modes())


def _append_rank(a: Layout, r: int) -> Layout:
    modes = a.modes() if isinstance(a.shape, tuple) else [a]
    return make_layout(*modes, *[Layout(1, 0)] * (r - len(modes)))


# --8<-- [start:tv_layout]
def raked_product(block: Layout, tiler: Layout) -> Layout:
    """Each mode is (tiler's mode, block's mode): the block's elements are interleaved ("raked")
    with stride size(tiler) instead of sitting together as in blocked_product."""
    r = max(len(block), len(tiler))
    a, b = _append_rank(block, r), _append_rank(tiler, r)
    p = logical_product(a, b)  # one 1-D product of the whole layouts, then mode i of each zipped
    return make_layout(*[make_layout(p[1][i], a[i]) for i in range(r)])


def right_inverse(layout: Layout) -> Layout:
    """R with layout(R(i)) == i for i < size(R): follow the strides 1, s0*d0, ... of the coalesced layout."""
    c = coalesce(layout)
    shapes, strides = flatten(c.shape), flatten(c.stride)
    pre = [prod(shapes[:i]) for i in range(len(shapes))]
    out_s, out_d, cur = [1], [0], 1
    for i in sorted(range(len(shapes)), key=lambda i: strides[i]):
        if strides[i] == cur:
            out_s.append(shapes[i])
            out_d.append(pre[i])
            cur = shapes[i] * strides[i]
    return coalesce(Layout(tuple(out_s), tuple(out_d)))


def make_layout_tv(thr: Layout, val: Layout) -> tuple[Layout, tuple]:
    """As CuTe's make_tiled_copy: thr maps (m,n) in a thread grid to a thread id, val maps (m,n) in one
    thread's block to a value id. Returns the TV layout (thread, value) -> column-major index in the
    tile, and the tile's shape."""
    layout_mn = raked_product(thr, val)  # (m, n) -> thread + size(thr) * value
    tv = composition(right_inverse(layout_mn), Layout((size(thr), size(val))))
    return tv, tuple(size(m) for m in layout_mn.modes())


def owner(tv: Layout, tile: tuple, m: int, n: int) -> tuple[int, int]:
    """Which (thread, value) holds element (m, n) of the tile."""
    target = m + tile[0] * n  # the tile's column-major index
    return next((t, v) for t in range(size(tv[0])) for v in range(size(tv[1])) if tv(t, v) == target)
# --8<-- [end:tv_layout]


# --8<-- [start:swizzle]
@dataclass(frozen=True)
class Swizzle:
    """Swizzle<B, M, S>: XOR the B bits at [M+S, M+S+B) of an offset into the B bits at [M, M+B).
    The low M bits (a run of 2^M contiguous elements) are never touched."""
    bits: int
    base: int
    shift: int

    def __post_init__(self):
        if self.bits < 0 or self.base < 0 or abs(self.shift) < self.bits:
            raise ValueError(f"Swizzle<{self.bits},{self.base},{self.shift}> is not valid")

    def __call__(self, offset: int) -> int:
        mask = ((1 << self.bits) - 1) << (self.base + max(0, self.shift))
        y = offset & mask
        return offset ^ (y >> self.shift if self.shift >= 0 else y << -self.shift)


@dataclass(frozen=True)
class ComposedLayout:
    """swizzle o layout: the layout gives an element offset, the swizzle permutes it."""
    swizzle: Swizzle
    layout: Layout

    @property
    def shape(self):
        return self.layout.shape

    def __call__(self, *crd) -> int:
        return self.swizzle(self.layout(*crd))
# --8<-- [end:swizzle]


# --8<-- [start:banks]
def bank(offset: int, elem_bytes: int = 2, bank_bytes: int = 4, banks: int = 32) -> int:
    """The shared-memory bank holding an element offset (32 banks of 4 bytes)."""
    return offset * elem_bytes // bank_bytes % banks


def conflict_ways(layout, coords, vec: int = 8, elem_bytes: int = 2) -> int:
    """Each coordinate reads vec contiguous elements (one 16-byte vector); the number of distinct 4-byte
    words that land in the busiest bank: 1 means conflict-free, n an n-way conflict."""
    words: dict[int, set[int]] = {}
    for m, n in coords:
        for i in range(vec):
            w = layout(m, n + i) * elem_bytes // 4
            words.setdefault(w % 32, set()).add(w)
    return max(len(ws) for ws in words.values())
# --8<-- [end:banks]
