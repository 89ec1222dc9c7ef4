"""The repository's layout rules.

One name per topic: a lab notebook NN-rest draws on a snippets/<topic>/ package whose name (kebab-case) is a
dash-delimited part of `rest`, and that topic has tests/test_<topic>*.py; every topic package has such tests.

No topic reaches into another's private names: shared pieces are public (snippets/common/ or a public name of
the one topic that defines them). Checked on the source with `ast`, so a failure names file, line and name.
"""
import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- one name per topic

def topics(root: Path) -> list[str]:
    """The snippets/<topic>/ packages, common (the shared modules) left out."""
    return sorted(p.parent.name for p in (root / "snippets").glob("*/__init__.py") if p.parent.name != "common")


def topic_of_stem(stem: str, names: list[str]) -> str | None:
    """The topic whose kebab-case name is a run of the dash-delimited parts after NN- (the longest if several)."""
    parts = stem.split("-")[1:]
    found = [t for t in names
             if any(parts[i:i + len(t.split("_"))] == t.split("_") for i in range(len(parts)))]
    return max(found, key=len) if found else None


def has_tests(root: Path, topic: str) -> bool:
    return any((root / "tests").glob(f"test_{topic}*.py"))


def layout_problems(root: Path) -> list[str]:
    names, problems = topics(root), []
    for nb in sorted((root / "notebooks").glob("*.ipynb")):
        topic = topic_of_stem(nb.stem, names)
        if topic is None:
            problems.append(f"notebooks/{nb.name}: no snippets/<topic>/ package is named by a part of "
                            f"'{nb.stem.split('-', 1)[-1]}' (topics: {', '.join(names)})")
        elif not has_tests(root, topic):
            problems.append(f"notebooks/{nb.name}: its topic {topic} has no tests/test_{topic}*.py")
    for topic in names:
        if not has_tests(root, topic):
            problems.append(f"snippets/{topic}/: no tests/test_{topic}*.py")
    return problems


def test_every_notebook_and_topic_share_one_name():
    problems = layout_problems(ROOT)
    assert not problems, "\n".join(problems)


def test_inference_notebooks_map_to_the_inference_topic():
    names = topics(ROOT)
    assert topic_of_stem("03-inference-paged-kv", names) == "inference"
    assert topic_of_stem("07-kernel-agent-harness", names) == "kernel_agent"
    assert topic_of_stem("09-paged-kv-cache", names) is None


def make_tree(tmp_path: Path, notebooks: list[str], packages: list[str], tests: list[str]) -> Path:
    for nb in notebooks:
        (tmp_path / "notebooks").mkdir(exist_ok=True)
        (tmp_path / "notebooks" / nb).write_text("{}")
    for pkg in packages:
        (tmp_path / "snippets" / pkg).mkdir(parents=True)
        (tmp_path / "snippets" / pkg / "__init__.py").write_text("")
    (tmp_path / "tests").mkdir()
    for t in tests:
        (tmp_path / "tests" / t).write_text("")
    return tmp_path


@pytest.mark.parametrize("notebooks, packages, tests, named", [
    (["03-paged-kv-cache.ipynb"], ["inference", "common"], ["test_inference_x.py"], "notebooks/03-paged-kv-cache.ipynb"),
    (["03-inference-paged-kv.ipynb"], ["inference"], ["test_paged_kv.py"], "notebooks/03-inference-paged-kv.ipynb"),
    (["03-inference-paged-kv.ipynb"], ["inference", "serving"], ["test_inference.py"], "snippets/serving/"),
])
def test_layout_rule_names_the_file_that_breaks_it(tmp_path, notebooks, packages, tests, named):
    problems = layout_problems(make_tree(tmp_path, notebooks, packages, tests))
    assert problems and any(p.startswith(named) for p in problems), problems


def test_layout_rule_accepts_a_good_tree(tmp_path):
    root = make_tree(tmp_path, ["03-inference-paged-kv.ipynb", "07-kernel-agent-harness.ipynb"],
                     ["inference", "kernel_agent", "common"], ["test_inference_mma.py", "test_kernel_agent.py"])
    assert layout_problems(root) == []


# ---------------------------------------------------------------- no reaching into another topic's privates

def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_of(rel: Path) -> str:
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def topic_of_module(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "snippets" else None


def absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from ... import` names (relative imports resolved against `module`)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def private_uses(source: str, rel: Path) -> list[str]:
    """'path:line: why' for each private name this file takes from another module, or reads or sets on another
    topic's module (rel: the file's path from the repository root, e.g. snippets/moe/grouped_tma.py)."""
    tree, module = ast.parse(source), module_of(rel)
    own_topic, is_package = topic_of_module(module), rel.name == "__init__.py"
    aliases = {}  # local name -> the snippets module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = absolute(node, module, is_package)
            if not src.startswith("snippets"):
                continue
            for a in node.names:
                if is_private(a.name) and src != module:
                    found.append(f"{rel}:{node.lineno}: imports the private name {a.name} from {src}")
                aliases[a.asname or a.name] = f"{src}.{a.name}"  # a submodule, or a name (never a module's topic)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("snippets"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for node in ast.walk(tree):
        target = attr = None
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            target, attr = node.value, node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "delattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and is_private(node.args[1].value)):  # monkeypatching spelled with setattr
            target, attr = node.args[0], node.args[1].value
        if target is None:
            continue
        chain = []
        while isinstance(target, ast.Attribute):
            chain.insert(0, target.attr)
            target = target.value
        if not isinstance(target, ast.Name) or target.id not in aliases:
            continue
        other = ".".join([aliases[target.id], *chain])
        topic = topic_of_module(other)
        if topic is not None and topic != own_topic:
            found.append(f"{rel}:{node.lineno}: uses {attr} of {other}, a private name of topic {topic}")
    return sorted(set(found), key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


def test_no_snippet_takes_another_modules_private_names():
    found = []
    for path in sorted((ROOT / "snippets").rglob("*.py")):
        rel = path.relative_to(ROOT)
        found += private_uses(path.read_text(encoding="utf-8"), rel)
    assert not found, "private names used across modules (make them public, or move them to snippets/common):\n" \
        + "\n".join(found)


BAD = '''
from snippets.gemm.triton_ws import _tile_coords
from snippets.fusion import add_layernorm as al
import snippets.gemm.hopper as hp
import snippets.gemm.bench
from . import _local_helper

al._empty = lambda *a: None
y = hp._empty((1,), None, "cpu")
snippets.gemm.bench._no_tf32()
setattr(al, "_empty", None)
'''

GOOD = '''
import torch
import torch._dynamo
from snippets.moe import grouped_gemm as gg
from snippets.common.tiles import tile_coords

torch._dynamo.config.cache_size_limit = 256
k = gg._grouped_kernel
torch._grouped_mm
x.__class__
'''


def test_private_name_check_catches_every_form():
    found = private_uses(BAD, Path("snippets/moe/bad.py"))
    text = "\n".join(found)
    assert "snippets/moe/bad.py:2: imports the private name _tile_coords from snippets.gemm.triton_ws" in text
    assert "snippets/moe/bad.py:6: imports the private name _local_helper from snippets.moe" in text
    assert "snippets/moe/bad.py:8: uses _empty of snippets.fusion.add_layernorm" in text  # monkeypatching
    assert "snippets/moe/bad.py:9: uses _empty of snippets.gemm.hopper" in text
    assert "snippets/moe/bad.py:10: uses _no_tf32 of snippets.gemm.bench" in text
    assert "snippets/moe/bad.py:11: uses _empty of snippets.fusion.add_layernorm" in text  # setattr
    assert len(found) == 6, text


def test_private_name_check_leaves_own_topic_and_third_party_alone():
    assert private_uses(GOOD, Path("snippets/moe/good.py")) == []


def test_private_name_check_fails_the_suite_naming_file_line_and_name(tmp_path, monkeypatch):
    (tmp_path / "snippets" / "moe").mkdir(parents=True)
    (tmp_path / "snippets" / "moe" / "bad.py").write_text(BAD)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match=r"snippets/moe/bad.py:2: imports the private name _tile_coords"):
        test_no_snippet_takes_another_modules_private_names()
