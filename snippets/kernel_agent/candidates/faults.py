"""Candidates that break the worker: an illegal address, an endless loop, a memory hog."""

from snippets.kernel_agent.candidates.softmax import FUSED, HEADER

CRASH = HEADER + '''

@triton.jit
def far_load(x_ptr, out_ptr):
    i = tl.program_id(0)
    tl.store(out_ptr + i, tl.load(x_ptr + (1 << 40) + i))  # 4 TiB past x: SIGSEGV on the CPU, illegal address on a GPU


def kernel(x, out):
    far_load[(1,)](x, out)
'''

HANG = FUSED.replace("def kernel(x, out):\n", "def kernel(x, out):\n    while True:\n        pass\n")

HOG = FUSED.replace("def kernel(x, out):\n", '''def kernel(x, out):
    hoard = []
    for _ in range(64):  # up to 16 GiB of host memory, 256 MiB at a time
        hoard.append(torch.ones(1 << 26))
''')

FAULTS = {"crash": (CRASH, "crashed"), "hang": (HANG, "timeout"), "memory_hog": (HOG, "out of memory")}
