"""Shipped candidates: honest ones per task (fast and slow), cheats (all softmax) and faulty ones."""
from snippets.kernel_agent.candidates import add_rmsnorm, gemm_gelu, softmax
from snippets.kernel_agent.candidates.cheats import CHEATS, Cheat
from snippets.kernel_agent.candidates.faults import FAULTS

# (task name, candidate name, source); "cuda" candidates run on a GPU only
HONEST = [
    ("softmax", "softmax_fused", softmax.FUSED),
    ("softmax", "softmax_looped", softmax.LOOPED),
    ("add_rmsnorm", "add_rmsnorm_fused", add_rmsnorm.FUSED),
    ("add_rmsnorm", "add_rmsnorm_two_kernels", add_rmsnorm.TWO_KERNELS),
    ("gemm_bias_gelu", "gemm_tiled_fused", gemm_gelu.TILED),
    ("gemm_bias_gelu", "gemm_rowwise", gemm_gelu.ROWWISE),
]
CUDA = [("add_rmsnorm", "add_rmsnorm_cuda", add_rmsnorm.CUDA)]

__all__ = ["CHEATS", "CUDA", "Cheat", "FAULTS", "HONEST"]
