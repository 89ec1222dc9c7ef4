"""README and CONTRIBUTING say what the tools do: their commands, variables, paths and examples exist."""
import importlib.util
import re
from pathlib import Path

import pytest

from kb.sections import sections

ROOT = Path(__file__).resolve().parents[1]
DOCS = {name: (ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "CONTRIBUTING.md")}
MAKEFILE = (ROOT / "Makefile").read_text(encoding="utf-8")
TARGETS = set(re.findall(r"^([a-z][a-z-]*):", MAKEFILE, re.M))


@pytest.mark.parametrize("name", DOCS)
def test_every_make_command_and_variable_exists(name):
    for verb, args in re.findall(r"`make ([a-z][a-z-]*)([^`]*)`", DOCS[name]):
        assert verb in TARGETS, f"{name}: `make {verb}` is not a Makefile target"
        for var in re.findall(r"\b([A-Z][A-Z_]+)=", args):
            assert re.search(rf"\b{var}\b", MAKEFILE), f"{name}: make cannot pass {var}= (the Makefile never reads it)"


@pytest.mark.parametrize("name", DOCS)
def test_every_python_module_command_exists(name):
    for module in re.findall(r"python -m ([\w.]+)", DOCS[name]):
        assert importlib.util.find_spec(module) is not None, f"{name}: `python -m {module}`: no such module"


@pytest.mark.parametrize("name", DOCS)
def test_every_snippet_example_is_a_real_section(name):
    defined = sections()
    for path, section in re.findall(r'--8<-- "([^":]+\.\w+):([\w-]+)"', DOCS[name]):
        assert (path, section) in defined, f"{name}: cites snippets/{path}:{section}, which is not a section"


def test_readme_layout_table_matches_the_tree():
    rows = re.findall(r"^\| `([^`]+)`", DOCS["README.md"].split("## Where things live", 1)[1], re.M)
    assert rows, "README.md: no layout table under 'Where things live'"
    for pattern in rows:
        concrete = re.sub(r"<[^>]+>|\{[^}]*\}", "*", pattern).replace("NN", "[0-9][0-9]").split(",")[0].strip()
        assert list(ROOT.glob(concrete.rstrip("/"))) or (ROOT / concrete).exists(), f"README.md: {pattern} matches nothing"
    top = {p.name + "/" for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
           and p.name not in {"node_modules", "site", "test-artifacts"} and (ROOT / ".git").exists()
           and not _ignored(p)}
    listed = {r.split("/")[0] + "/" for r in rows}
    assert top <= listed, f"README.md: folders missing from the layout table: {sorted(top - listed)}"


def _ignored(path: Path) -> bool:
    import subprocess
    r = subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=ROOT)
    return r.returncode == 0
