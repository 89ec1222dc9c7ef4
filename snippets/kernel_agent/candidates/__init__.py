"""Shipped candidates: an honest reference for every task (and slower variants), and the red team."""
from snippets.kernel_agent.candidates import add_rmsnorm, blocks, gemm_gelu, rows, softmax
from snippets.kernel_agent.candidates.redteam import CHEATS, Cheat

# task name -> its honest reference candidate (the one fast_p counts)
REFERENCE = {
    "softmax": softmax.FUSED, "add_rmsnorm": add_rmsnorm.FUSED, "gemm_bias_gelu": gemm_gelu.TILED,
    "layernorm": rows.LAYERNORM, "l2norm": rows.L2NORM, "row_sum": rows.ROW_SUM,
    "cross_entropy": rows.CROSS_ENTROPY, "topk": rows.TOPK, "swiglu": blocks.SWIGLU, "rotary": blocks.ROTARY,
    "attention": blocks.ATTENTION, "matmul": blocks.MATMUL,
}
# (task name, candidate name, source): slower honest variants, which must be accepted too
VARIANTS = [
    ("softmax", "softmax_looped", softmax.LOOPED),
    ("add_rmsnorm", "add_rmsnorm_two_kernels", add_rmsnorm.TWO_KERNELS),
    ("gemm_bias_gelu", "gemm_rowwise", gemm_gelu.ROWWISE),
]
HONEST = [(t, f"{t}_reference", s) for t, s in REFERENCE.items()] + VARIANTS
CUDA = [("add_rmsnorm", "add_rmsnorm_cuda", add_rmsnorm.CUDA)]  # load_inline: a GPU only

__all__ = ["CHEATS", "CUDA", "Cheat", "HONEST", "REFERENCE", "VARIANTS"]
