"""Honest candidates for SwiGLU, rotary embedding, causal attention and a plain fp32 GEMM."""

from snippets.kernel_agent.candidates.softmax import HEADER

SWIGLU = HEADER + '''

@triton.jit
def swiglu(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs, mask=offs < n, other=0.0)
    b = tl.load(b_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, a / (1.0 + tl.exp(-a)) * b, mask=offs < n)


def kernel(a, b, out):
    swiglu[(triton.cdiv(a.numel(), 1024),)](a, b, out, a.numel(), BLOCK=1024)
'''

ROTARY = HEADER + '''

@triton.jit
def rotary_rows(x_ptr, cos_ptr, sin_ptr, out_ptr, heads, half, BLOCK: tl.constexpr):
    r, cols = tl.program_id(0), tl.arange(0, BLOCK)
    mask, base, t = cols < half, r * 2 * half, r // heads
    x1 = tl.load(x_ptr + base + cols, mask=mask)
    x2 = tl.load(x_ptr + base + half + cols, mask=mask)
    c = tl.load(cos_ptr + t * half + cols, mask=mask)
    s = tl.load(sin_ptr + t * half + cols, mask=mask)
    tl.store(out_ptr + base + cols, x1 * c - x2 * s, mask=mask)
    tl.store(out_ptr + base + half + cols, x2 * c + x1 * s, mask=mask)


def kernel(x, cos, sin, out):
    t, h, d = x.shape
    rotary_rows[(t * h,)](x, cos, sin, out, h, d // 2, BLOCK=triton.next_power_of_2(d // 2))
'''

ATTENTION = HEADER + '''

@triton.jit
def causal_attention(q_ptr, k_ptr, v_ptr, o_ptr, T, scale, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    start, base = tl.program_id(0) * BM, tl.program_id(1) * T * D
    rm, rd = start + tl.arange(0, BM), tl.arange(0, D)
    q = tl.load(q_ptr + base + rm[:, None] * D + rd[None, :], mask=rm[:, None] < T, other=0.0)
    m_i = tl.full([BM], -float("inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    for n0 in range(0, start + BM, BN):  # keys up to the block's last query
        rn = n0 + tl.arange(0, BN)
        k = tl.load(k_ptr + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        s = tl.where((rn[None, :] <= rm[:, None]) & (rn[None, :] < T), s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        v = tl.load(v_ptr + base + rn[:, None] * D + rd[None, :], mask=rn[:, None] < T, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_new
    tl.store(o_ptr + base + rm[:, None] * D + rd[None, :], acc / l_i[:, None], mask=rm[:, None] < T)


def kernel(q, k, v, out):
    b, t, d = q.shape
    bm = 64 if q.is_cuda else 16
    causal_attention[(triton.cdiv(t, bm), b)](q, k, v, out, t, d ** -0.5, D=d, BM=bm, BN=bm)
'''

MATMUL = HEADER + '''

@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + rn[None, :], mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")  # fp32 as asked; tf32 fails the tolerance
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def kernel(a, b, out):
    (M, K), N = a.shape, b.shape[1]
    bm, bn, bk = (128, 128, 32) if a.is_cuda else (16, 16, 16)
    matmul[(triton.cdiv(M, bm), triton.cdiv(N, bn))](a, b, out, M, N, K, BM=bm, BN=bn, BK=bk,
                                                      num_warps=8 if a.is_cuda else 4)
'''
