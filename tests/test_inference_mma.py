"""The W4A16 and W8A16 tensor-core GEMV (snippets/inference/serving/csrc/w4_mma_gemv.cu): its weight order against the PTX
ISA's fragment layout and its dequantisation on the CPU, its sm_90a build, and on a GPU its result."""
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from sass_loop import loop_ops
from snippets.common.cuda_tools import find_nvcc
from snippets.inference.serving import mma_gemv, quant


@pytest.mark.parametrize("bits", [4, 8])
def test_packed_words_are_the_a_fragments_of_the_dequantised_weights(bits):
    q, s = quant.quantize(torch.randn(48, 512), bits)
    p = mma_gemv.pack_mma(q, s, bits=bits)
    want = torch.round(quant.dequantize(q, s, bits) / s.repeat_interleave(128, 1)).T.numpy()  # [K, N] values
    assert p.wq.shape == (4, 3, bits // 2, 32, 4) and np.array_equal(mma_gemv.fragments(p), want)
    with pytest.raises(ValueError, match="multiple of 16"):
        mma_gemv.pack_mma(*quant.quantize(torch.randn(24, 256), 4))


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc (the pinned pip wheel or a CUDA toolkit)")
def test_kernel_builds_for_sm90a_without_spills_and_one_hmma_per_word():
    from snippets.gemm import hopper

    with tempfile.TemporaryDirectory() as d:
        built = hopper.compile_source(mma_gemv.SRC, Path(d) / "w4.cubin")
        text = hopper.sass(Path(d) / "w4.cubin")
    assert len(built["ptxas"]) == 9  # three configurations: W4 in fp16 and bf16, W8 in fp16
    for name, stats in built["ptxas"].items():
        dtype, bits, tw, stages = re.search(r"gemvI(\w+?)Li(\d+)ELi(\d+)ELi\d+ELi(\d+)E", name).groups()
        bits, tw, stages, bf16 = int(bits), int(tw), int(stages), "bfloat16" in dtype
        assert stats["spill_stores"] == stats["spill_loads"] == 0, (name, stats)
        ops = loop_ops(text.split(name, 1)[1].split("Function : ", 1)[0])  # the loop over groups
        words = 2 * bits * tw * stages  # per lane in the loop's body (a group per stage)
        if bits == 8:  # a word per two registers: one PRMT each, one HMMA per two words
            assert ops["HMMA"] == words // 2 and ops["PRMT"] == 2 * words and "LOP3" not in ops, (name, ops)
            # sm_90a, nvcc 13.0: 6.7-7.8 instructions per word (the f16x2 Triton GEMV: about 15)
            assert sum(ops.values()) <= 8.0 * words, (name, ops)
            continue
        assert ops["HMMA"] == words and ops["LOP3"] == 4 * words, (name, ops)
        # sm_90a, nvcc 13.0, fp16: 13.3-14.1 instructions per word at TW = 2, 14.3 at 1 (the f16x2 Triton GEMV: about
        # 24); bf16 two more (the shifts of the high nibbles)
        assert sum(ops.values()) <= ({2: 14.5, 1: 15.0}[tw] + 2 * bf16) * words, (name, ops)


def _bits_to_float(t: np.ndarray, bf16: bool) -> np.ndarray:
    """[..., 2] halves of uint32 words as float32."""
    halves = np.stack([t & np.uint32(0xFFFF), t >> np.uint32(16)], -1)
    if bf16:
        return (halves << np.uint32(16)).view(np.float32)
    return halves.astype(np.uint16).view(np.float16).astype(np.float32)


@pytest.mark.parametrize("bf16", [False, True])
def test_dequantisation_gives_register_j_nibbles_j_and_j_plus_4(bf16):
    """The kernel's dequant and dequant_bf16, in numpy with the constants of the PTX: from a word with nibbles u_f,
    register d_j holds u_j - 8 in its low half and u_(j+4) - 8 in its high half, exactly (fragments() assumes it)."""
    rng = np.random.default_rng(0)
    w = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
    for j in range(4):
        if bf16:  # shift by 4j, LOP3 under 0x4300 (128 + u), HFMA2 times 1 minus 136
            d = _bits_to_float((w >> np.uint32(4 * j)) & np.uint32(0x000F000F) | np.uint32(0x43004300), True) - 136
        elif j % 2 == 0:  # shift by 4j, LOP3 under 0x6400 (1024 + u), HSUB2 1032
            d = _bits_to_float((w >> np.uint32(4 * j)) & np.uint32(0x000F000F) | np.uint32(0x64006400), False) - 1032
        else:  # in place (1024 + 16 u), HFMA2 times 1/16 minus 72
            t = (w >> np.uint32(4 * (j - 1))) & np.uint32(0x00F000F0) | np.uint32(0x64006400)
            d = _bits_to_float(t, False) / 16 - 72
        for h in range(2):
            want = ((w >> np.uint32(4 * (j + 4 * h))) & np.uint32(0xF)).astype(np.float32) - 8
            assert np.array_equal(d[:, h], want), (j, h)


def test_w8_dequantisation_gives_register_pairs_of_bytes():
    """dequant8 in numpy with the constants of the PTX: PRMT 0x4140 and 0x4342 put bytes (0, 1) and (2, 3) under
    0x64 (1024 + u), HSUB2 1152 leaves u - 128, the stored q + 128 minus 128, exactly."""
    rng = np.random.default_rng(0)
    w = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
    byte = [(w >> np.uint32(8 * b)) & np.uint32(0xFF) for b in range(4)]
    for j, (lo, hi) in enumerate(((0, 1), (2, 3))):
        d = _bits_to_float(byte[lo] | np.uint32(0x6400) | (byte[hi] << np.uint32(16)) | np.uint32(0x64000000), False)
        d = d - 1152
        assert np.array_equal(d[:, 0], byte[lo].astype(np.float32) - 128), j
        assert np.array_equal(d[:, 1], byte[hi].astype(np.float32) - 128), j


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs an sm_90a GPU")
@pytest.mark.parametrize("bits,dtype", [(4, torch.float16), (4, torch.bfloat16), (8, torch.float16)])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_kernel_matches_dequantise_then_multiply(m, bits, dtype):
    q, s = quant.quantize(torch.randn(512, 2048, device="cuda") / 32, bits)
    p = mma_gemv.pack_mma(q, s, bits=bits)
    x = torch.randn(m, 2048, device="cuda").to(dtype)
    ref = x.float() @ quant.dequantize(q, s, bits).to(dtype).float().T
    tol = 1e-3 if dtype == torch.float16 else 1e-2  # y is rounded to x's dtype
    for tw, stages, splits in ((2, 1, 1), (1, 2, 1), (2, 2, 1), (2, 1, 2), (2, 1, 2)):  # twice split: the workspace
        y = mma_gemv.mma_gemv(x, p, tw=tw, kw=8, stages=stages, splits=splits)  # must come back zeroed
        assert y.dtype == dtype and ((y.float() - ref).norm() / ref.norm()).item() < tol, (tw, stages, splits)
