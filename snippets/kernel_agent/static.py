"""Static checks on a candidate's source (AST): each finding is a named reason, e.g. 'calls the reference'.

Rules follow KernelBench's kernel_static_checker (some from the Kevin-32B paper's reward hacks): no
try/except fallback, no PyTorch op that does the work, a real kernel must be present.
"""
from __future__ import annotations

import ast

from snippets.kernel_agent.spec import Task

CALLS_REFERENCE = "calls the reference"
TORCH_OP = "calls a PyTorch op that does the work"
TRY_FALLBACK = "try/except fallback"
FORBIDDEN_IMPORT = "imports a forbidden module"
DYNAMIC_CODE = "runs dynamic code or reads interpreter internals"
PATCHES = "patches a module"
NO_ENTRY = "no entry point"
NO_KERNEL = "no kernel"
SYNTAX = "does not parse"

FORBIDDEN_MODULES = {"os", "sys", "ctypes", "cffi", "subprocess", "inspect", "gc", "importlib", "builtins",
                     "pickle", "marshal", "signal", "socket", "multiprocessing", "shutil", "pathlib", "io",
                     "tempfile", "mmap", "resource", "faulthandler", "snippets", "__main__"}
DYNAMIC_CALLS = {"eval", "exec", "compile", "__import__", "getattr", "setattr", "delattr", "globals", "locals",
                 "vars", "open", "breakpoint"}
# ops that do a task's work when called on torch, F, a tensor or torch.ops (tl.* and libdevice are fine)
COMPUTE_OPS = {"matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "linear", "conv1d", "conv2d", "conv3d",
               "softmax", "log_softmax", "layer_norm", "rms_norm", "group_norm", "batch_norm", "gelu", "silu",
               "relu", "sigmoid", "tanh", "erf", "exp", "log", "sum", "mean", "var", "std", "norm", "amax",
               "max", "logsumexp", "sqrt", "rsqrt", "pow", "square", "mul", "add", "sub", "div", "addcmul",
               "cumsum", "dot", "mv", "outer", "tensordot", "scaled_dot_product_attention", "compile", "where"}
TRITON_ROOTS = {"tl", "triton", "libdevice", "math"}


def _chain(node: ast.AST) -> list[str]:
    """a.b.c -> ['a', 'b', 'c']; a root that is not a plain name (a call, a subscript) reads '?'."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id if isinstance(node, ast.Name) else "?", *reversed(parts)]


def check_source(source: str, task: Task) -> list[str]:
    """Every rule the source breaks, as 'reason (detail, line n)'; empty when it passes."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [f"{SYNTAX} ({e.msg}, line {e.lineno})"]
    except (ValueError, MemoryError, RecursionError) as e:  # null bytes, or nesting too deep for the parser
        return [f"{SYNTAX} ({type(e).__name__})"]
    found: list[str] = []
    refs = {task.reference.__name__, task.baseline.__name__, "reference", "baseline"}
    modules = {"torch", "triton", "tl", "F"}
    banned = COMPUTE_OPS | set(task.banned_ops)

    def flag(reason: str, what: str, node: ast.AST) -> None:
        item = f"{reason} ({what}, line {getattr(node, 'lineno', '?')})"
        if item not in found:
            found.append(item)

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names]
            roots = [n.split(".")[0] for n in names] if isinstance(node, ast.Import) \
                else [(node.module or "").split(".")[0]]
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names}
            if refs & set(names):
                flag(CALLS_REFERENCE, f"imports {sorted(refs & set(names))[0]}", node)
            for root in roots:
                if root in FORBIDDEN_MODULES:
                    flag(FORBIDDEN_IMPORT, root, node)
        elif isinstance(node, ast.Name) and node.id in refs:
            flag(CALLS_REFERENCE, node.id, node)
        elif isinstance(node, ast.Attribute):
            if node.attr in refs:
                flag(CALLS_REFERENCE, node.attr, node)
            if node.attr.startswith("__") or node.attr.startswith("f_") or node.attr in {"_C", "aten"}:
                flag(DYNAMIC_CODE, node.attr, node)
        elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            flag(TRY_FALLBACK, "try", node)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            flag(TORCH_OP, "@", node)
        elif isinstance(node, ast.Call):
            chain = _chain(node.func)
            if isinstance(node.func, ast.Name) and node.func.id in DYNAMIC_CALLS:
                flag(DYNAMIC_CODE, node.func.id, node)
            elif chain and chain[-1] == "suppress":
                flag(TRY_FALLBACK, "contextlib.suppress", node)
            elif len(chain) > 1 and chain[0] not in TRITON_ROOTS and chain[-1].rstrip("_") in banned:
                flag(TORCH_OP, ".".join(chain), node)
            elif len(chain) > 2 and chain[:2] == ["torch", "nn"]:
                flag(TORCH_OP, ".".join(chain), node)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and _chain(t)[0] in modules:
                    flag(PATCHES, ".".join(_chain(t)), node)
    # the nn.functional alias: any call rooted at an alias of torch.nn(.functional) does the work
    aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
               for a in n.names if "nn" in ((getattr(n, "module", "") or "") + "." + a.name).split(".")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _chain(node.func)[0] in aliases:
            flag(TORCH_OP, ".".join(_chain(node.func)), node)
    _check_structure(tree, source, task, found)
    return found


def _check_structure(tree: ast.Module, source: str, task: Task, found: list[str]) -> None:
    """An entry point at module level, and a kernel: @triton.jit with tl.load/tl.store/tl.program_id,
    or a CUDA __global__ function built with load_inline."""
    if not any(isinstance(n, ast.FunctionDef) and n.name == task.entry for n in tree.body):
        found.append(f"{NO_ENTRY} (no top-level def {task.entry})")
    jitted = any(isinstance(n, ast.FunctionDef) and any(_chain(d)[-1:] == ["jit"] for d in n.decorator_list)
                 for n in ast.walk(tree))
    used = {_chain(n.func)[-1] for n in ast.walk(tree) if isinstance(n, ast.Call) and _chain(n.func)[0] == "tl"}
    triton_ok = jitted and {"load", "store", "program_id"} <= used
    cuda_ok = "__global__" in source and "load_inline" in source
    if not (triton_ok or cuda_ok):
        found.append(f"{NO_KERNEL} (needs a @triton.jit kernel using tl.program_id, tl.load and tl.store, "
                     "or a CUDA __global__ kernel built with load_inline)")
