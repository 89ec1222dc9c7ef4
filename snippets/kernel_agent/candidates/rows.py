"""Honest candidates for the row-wise tasks: LayerNorm, L2 norm, row sum, cross-entropy and top-8."""

from snippets.kernel_agent.candidates.softmax import HEADER

LAYERNORM = HEADER + '''

@triton.jit
def layernorm_rows(x_ptr, w_ptr, b_ptr, out_ptr, n, stride, eps, BLOCK: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    d = tl.where(mask, x - tl.sum(x, axis=0) / n, 0.0)  # two passes: E[x^2] - E[x]^2 cancels badly
    rstd = 1.0 / tl.sqrt_rn(tl.sum(d * d, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride + cols, d * rstd * w + b, mask=mask)


def kernel(x, weight, bias, out):
    block = triton.next_power_of_2(x.shape[1])
    layernorm_rows[(x.shape[0],)](x, weight, bias, out, x.shape[1], x.stride(0), 1e-5, BLOCK=block,
                                  num_warps=4 if block <= 2048 else 8)
'''

L2NORM = HEADER + '''

@triton.jit
def l2norm_rows(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
    norm = tl.maximum(tl.sqrt_rn(tl.sum(x * x, axis=0)), 1e-12)
    tl.store(out_ptr + row * stride + cols, x / norm, mask=cols < n)


def kernel(x, out):
    block = triton.next_power_of_2(x.shape[1])
    l2norm_rows[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=block, num_warps=4 if block <= 2048 else 8)
'''

ROW_SUM = HEADER + '''

@triton.jit
def row_sum(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < n, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def kernel(x, out):
    row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=1024 if x.is_cuda else 64)
'''

CROSS_ENTROPY = HEADER + '''

@triton.jit
def cross_entropy_rows(x_ptr, t_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n, BLOCK):  # online log-sum-exp, one running maximum per lane
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    top = tl.max(m, axis=0)
    total = tl.sum(tl.where(m > -float("inf"), s * tl.exp(m - top), 0.0), axis=0)
    target = tl.load(t_ptr + row)
    tl.store(out_ptr + row, top + tl.log(total) - tl.load(x_ptr + row * stride + target))


def kernel(x, target, out):
    cross_entropy_rows[(x.shape[0],)](x, target, out, x.shape[1], x.stride(0), BLOCK=2048 if x.is_cuda else 64,
                                      num_warps=8 if x.is_cuda else 4)
'''

TOPK = HEADER + '''

@triton.jit
def top8_rows(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf"))
    for i in tl.static_range(8):  # take the largest, then remove exactly that one element
        tl.store(out_ptr + row * 8 + i, tl.max(x, axis=0))
        x = tl.where(cols == tl.argmax(x, axis=0), -float("inf"), x)


def kernel(x, out):
    block = triton.next_power_of_2(x.shape[1])
    top8_rows[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=block, num_warps=4 if block <= 2048 else 8)
'''
