"""Rules about what a candidate may use, judged on what ran (the profiler's ops and kernels), not on its spelling.

A task asks for the candidate's own Triton or CUDA kernels: PyTorch ops that compute, and library kernels
(ATen, cuBLAS, cuDNN, anything not defined in the candidate's source), are refused; ops and kernels that
only allocate, view, fill or copy are allowed. On a GPU the candidate's kernels must also account for a
real share of its measured time, so work done on the host (numpy, Python) cannot hide behind a token kernel.
"""
from __future__ import annotations

import ast
import re

# ATen ops that allocate, view, fill or copy: the Triton interpreter itself calls several of them
MOVEMENT_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "new_zeros", "new_full", "set_",
    "copy_", "clone", "fill_", "zero_", "zeros", "zeros_like", "full", "full_like", "ones", "ones_like",
    "view", "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute", "contiguous", "expand",
    "unsqueeze", "squeeze", "select", "slice", "narrow", "detach", "alias", "lift_fresh", "resolve_conj",
    "resolve_neg", "to", "_to_copy", "item", "_local_scalar_dense", "flatten", "unflatten", "record_stream",
    "view_as", "expand_as", "is_nonzero", "split", "unbind", "chunk", "stride", "size", "numel", "dim",
    "_unsafe_view", "is_same_size", "arange", "resize_",
}
MOVEMENT_KERNELS = ("FillFunctor", "copy_kernel", "Memcpy", "Memset", "CopyKernel", "direct_copy")
MIN_KERNEL_SHARE = 0.25  # of the measured time on a GPU; an honest kernel at the timing shape is far above

_SIGNATURE_CHARS = 512  # a __global__ function's name comes within this many characters: each scan is bounded

LIBRARY_WORK = "work done by library code"
NO_KERNEL = "no kernel of its own ran"
HOST_WORK = "time not spent in its own kernels"


def own_kernels(source: str) -> set[str]:
    """Names of the kernels the source defines: @triton.jit functions and CUDA __global__ functions."""
    names = set()
    for m in re.finditer(r"__global__\b", source):  # the name is the last word before the first '(' that follows
        head = re.sub(r"__launch_bounds__\s*\([^()]*\)", " ", source[m.end():m.end() + _SIGNATURE_CHARS]).split("(", 1)
        words = re.findall(r"\w+", head[0]) if len(head) == 2 else []
        if words:
            names.add(words[-1])
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # the static check names the problem
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                d = d.func if isinstance(d, ast.Call) else d
                if (isinstance(d, ast.Attribute) and d.attr in {"jit", "autotune", "heuristics"}) or \
                        (isinstance(d, ast.Name) and d.id in {"jit"}):
                    names.add(node.name)
    return names


def _ours(kernel: str, names: set[str]) -> bool:
    """The kernel is one of `names`: Triton's name as is, CUDA's demangled ('name(float const*, ...)') or
    mangled ('_Z18add_rmsnorm_kernelPKf...')."""
    return any(re.fullmatch(rf"(void )?{re.escape(n)}(\(.*\))?", kernel) or f"_Z{len(n)}{n}" in kernel
               for n in names)


def judge(profile: dict, source: str, device: str, launches: dict | None = None,
          measured_ms: float | None = None, calls: int = 1) -> str | None:
    """None when the profile keeps the rules, else the named problem. profile: {"DEV\\tname": [count, ns]}."""
    names = own_kernels(source)
    computed = sorted({k.split("\t", 1)[1] for k in profile if k.startswith("CPU\taten::")
                       and k.split("::", 1)[1] not in MOVEMENT_OPS})
    if computed:
        return f"{LIBRARY_WORK} (PyTorch ops that compute ran: {', '.join(computed[:4])})"
    if not device.startswith("cuda"):
        ran = {k for k, n in (launches or {}).items() if n and k in names}
        return None if ran else f"{NO_KERNEL} (no launch of a kernel its source defines: {sorted(names) or 'none'})"
    kernels = {k.split("\t", 1)[1]: v for k, v in profile.items() if k.startswith("CUDA\t")}
    foreign = sorted(k for k in kernels if not _ours(k, names) and not any(m in k for m in MOVEMENT_KERNELS))
    if foreign:
        return f"{LIBRARY_WORK} (kernels it did not define ran: {', '.join(f[:80] for f in foreign[:3])})"
    own_ns = sum(v[1] for k, v in kernels.items() if _ours(k, names))
    if own_ns == 0:
        return f"{NO_KERNEL} (the profiler saw none of {sorted(names) or 'no kernels defined'})"
    if measured_ms is not None and own_ns / 1e6 < MIN_KERNEL_SHARE * measured_ms * calls:
        return (f"{HOST_WORK} (its kernels ran {own_ns / 1e6 / calls:.3g} ms per call of the "
                f"{measured_ms:.3g} ms measured)")
    return None
