"""Teaching code and site machinery stay apart: snippets/ never imports kb/, hooks/ or MkDocs, and the site
(hooks/, kb/ but its lab runner) never imports the labs' runtime (snippets/, torch, triton)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNNER = {"kb/gpu_run.py"}  # executes labs: it asks snippets.common.env what device it runs on


def imported(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def offences(files, banned: set[str]) -> list[str]:
    return [f"{p.relative_to(ROOT)} imports {sorted(imported(p.read_text(encoding='utf-8')) & banned)}"
            for p in files if imported(p.read_text(encoding="utf-8")) & banned]


def test_snippets_never_import_site_machinery():
    assert offences(sorted((ROOT / "snippets").rglob("*.py")), {"kb", "hooks", "mkdocs", "material"}) == []


def test_site_machinery_never_imports_lab_runtime():
    files = [p for p in sorted((ROOT / "kb").rglob("*.py")) + sorted((ROOT / "hooks").glob("*.py"))
             if p.relative_to(ROOT).as_posix() not in RUNNER]
    assert offences(files, {"snippets", "torch", "triton"}) == []


@pytest.mark.parametrize("source, banned, hit", [
    ("import kb.results\n", {"kb"}, True),
    ("def f():\n    from snippets.common import env\n", {"snippets"}, True),
    ("x = 'from snippets.common import record'\n", {"snippets"}, False),  # a notebook cell's text, not an import
    ("from . import sibling\n", {"kb"}, False),
])
def test_the_scan_sees_imports_anywhere_and_only_imports(source, banned, hit):
    assert bool(imported(source) & banned) == hit


@pytest.mark.parametrize("have, need", [(None, None), (None, "8.0"), ((7, 5), "8.0"), ((9, 0), "8.0"), ((9, 0), "9.0a"),
                                        ((10, 0), "9.0a"), ((8, 9), "9.0a"), ((12, 0), "12.0")])
def test_the_site_and_the_labs_agree_on_hardware_needs(have, need):
    """kb keeps its own copy of the capability rule (it may not import snippets); the two must agree."""
    from kb.labs import capability_ok as site
    from snippets.common.hardware import capability_ok as lab
    assert site(have, need) == lab(have, need)
