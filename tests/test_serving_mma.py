"""The W4A16 tensor-core GEMV (snippets/serving/csrc/w4_mma_gemv.cu): its weight order against the PTX ISA's
fragment layout on the CPU, its sm_90a build, and on a GPU its result."""
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from sass_loop import loop_ops
from snippets.common.cuda_tools import find_nvcc
from snippets.serving import mma_gemv, quant


def test_packed_words_are_the_b_fragments_of_the_dequantised_weights():
    q, s = quant.quantize(torch.randn(48, 512), 4)
    p = mma_gemv.pack_mma(q, s)
    want = torch.round(quant.dequantize(q, s, 4) / s.repeat_interleave(128, 1)).T.numpy()  # [K, N] values
    assert p.wq.shape == (4, 3, 2, 32, 4) and np.array_equal(mma_gemv.fragments(p), want)
    with pytest.raises(ValueError, match="multiple of 16"):
        mma_gemv.pack_mma(*quant.quantize(torch.randn(24, 256), 4))


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc (the pinned pip wheel or a CUDA toolkit)")
def test_kernel_builds_for_sm90a_without_spills_and_one_hmma_per_word():
    from snippets.gemm import hopper

    with tempfile.TemporaryDirectory() as d:
        built = hopper.compile_source(mma_gemv.SRC, Path(d) / "w4.cubin")
        text = hopper.sass(Path(d) / "w4.cubin")
    for name, stats in built["ptxas"].items():
        tw, stages = map(int, re.search(r"gemvILi(\d+)ELi\d+ELi(\d+)E", name).groups())
        assert stats["spill_stores"] == stats["spill_loads"] == 0, (name, stats)
        ops = loop_ops(text.split(name, 1)[1].split("Function : ", 1)[0])  # the loop over groups
        words = 8 * tw * stages  # per lane in the loop's body (a group per stage)
        assert ops["HMMA"] == words and ops["LOP3"] == 4 * words, (name, ops)
        # sm_90a, nvcc 13.0: 12.1 instructions per word at TW = 4, 12.8-13.6 at 2, 13.8-15.4 at 1 (the f16x2 Triton
        # GEMV: about 24)
        assert sum(ops.values()) <= {4: 12.5, 2: 14.0, 1: 16.0}[tw] * words, (name, ops)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs an sm_90a GPU")
@pytest.mark.parametrize("m", [1, 3, 8])
def test_kernel_matches_dequantise_then_multiply(m):
    q, s = quant.quantize(torch.randn(512, 2048, device="cuda") / 32, 4)
    p = mma_gemv.pack_mma(q, s)
    x = torch.randn(m, 2048, device="cuda").half()
    ref = x.float() @ quant.dequantize(q, s, 4).half().float().T
    for tw, stages, splits in ((2, 1, 1), (1, 2, 1), (4, 2, 1), (2, 1, 2), (2, 1, 2)):  # twice split: the workspace
        y = mma_gemv.mma_gemv(x, p, tw=tw, kw=8, stages=stages, splits=splits)   # must come back zeroed
        assert ((y.float() - ref).norm() / ref.norm()).item() < 1e-3, (tw, stages, splits)
