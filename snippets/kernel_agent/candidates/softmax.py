"""Honest softmax candidates: one program per row (fast), and three passes in 32-wide chunks (slow)."""

HEADER = "import torch\nimport triton\nimport triton.language as tl\n"

ROWS_KERNEL = '''
@triton.jit
def softmax_rows(x_ptr, out_ptr, n_cols, x_stride, out_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * out_stride + cols, e / tl.sum(e, axis=0), mask=mask)


def launch(x, out):
    block = triton.next_power_of_2(x.shape[1])
    softmax_rows[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0), BLOCK=block,
                                num_warps=4 if block <= 2048 else 8)
'''
FUSED = HEADER + ROWS_KERNEL + '''

def kernel(x, out):
    launch(x, out)
'''

LOOPED = HEADER + '''

@triton.jit
def softmax_looped(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    base = tl.program_id(0) * stride
    top = tl.full([BLOCK], -float("inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        top = tl.maximum(top, tl.load(x_ptr + base + cols, mask=cols < n_cols, other=-float("inf")))
    m = tl.max(top, axis=0)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.exp(tl.load(x_ptr + base + cols, mask=cols < n_cols, other=-float("inf")) - m)
    total = tl.sum(acc, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < n_cols, other=0.0)
        tl.store(out_ptr + base + cols, tl.exp(x - m) / total, mask=cols < n_cols)


def kernel(x, out):
    softmax_looped[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=32)
'''
