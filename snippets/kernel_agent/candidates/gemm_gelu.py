"""Honest GEMM + bias + GELU candidates: tiled tl.dot with the epilogue fused (fast), and one program per
row and column block summing products without tensor cores (slow)."""

from snippets.kernel_agent.candidates.softmax import HEADER

TILED = HEADER + '''

@triton.jit
def gemm_bias_gelu(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + ks[None, :] * sak, mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * sbk + rn[None, :] * sbn, mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")  # fp32 as asked; the default tf32 fails the tolerance
    acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :]
    y = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, y, mask=(rm[:, None] < M) & (rn[None, :] < N))


def kernel(a, b, bias, out):
    (M, K), N = a.shape, b.shape[1]
    bm, bn, bk = (128, 128, 32) if a.is_cuda else (16, 16, 16)
    grid = (triton.cdiv(M, bm), triton.cdiv(N, bn))
    gemm_bias_gelu[grid](a, b, bias, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         out.stride(0), out.stride(1), BM=bm, BN=bn, BK=bk, num_warps=8 if a.is_cuda else 4)
'''

ROWWISE = HEADER + '''

@triton.jit
def gemm_row(a_ptr, b_ptr, bias_ptr, c_ptr, N, K, BN: tl.constexpr, BK: tl.constexpr):
    row = tl.program_id(0)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros([BN], tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + row * K + ks, mask=ks < K, other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + rn[None, :], mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.sum(a[:, None] * b, axis=0)
    acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0)
    tl.store(c_ptr + row * N + rn, 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476)), mask=rn < N)


def kernel(a, b, bias, out):
    (M, K), N = a.shape, b.shape[1]
    gemm_row[(M, triton.cdiv(N, 64))](a, b, bias, out, N, K, BN=64, BK=32)
'''
