"""Colab's path to a lab: every notebook's setup cell fetches the code from the one address in mkdocs.yml
(`repo_url`), and the notebook's imports work from that copy.

The address is served by a local bare clone of this commit (git's `url.<local>.insteadOf <repo_url>`), so a
setup cell that names another address reaches for the network, which the test machine does not have, and
fails here instead of in Colab. Each notebook runs in a clean process outside the repository, with a fresh
home directory, as Colab starts: the clone lands in ~/kb and nothing of this checkout is on sys.path.
"""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kb.lab_cells import setup_cell
from kb.labs import mkdocs_value

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def imports_of(notebook: Path) -> list[str]:
    """The notebook's imports of its own code (snippets, kb), wherever they stand, as top-level statements."""
    found = set()
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "\n".join(ln for ln in "".join(cell["source"]).splitlines() if not ln.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            module = node.module if isinstance(node, ast.ImportFrom) else \
                node.names[0].name if isinstance(node, ast.Import) else None
            if module and module.split(".")[0] in ("snippets", "kb") and getattr(node, "level", 0) == 0:
                found.add(ast.unparse(node))
    return sorted(found)


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """A bare clone of HEAD standing in for repo_url, and a clean home and working directory."""
    base = tmp_path_factory.mktemp("colab")
    remote = base / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(ROOT), str(remote)], check=True)
    (base / "home").mkdir()
    (base / "work").mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(base / "home"), "TRITON_INTERPRET": "1",
           "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.file://{remote}.insteadOf",
           "GIT_CONFIG_VALUE_0": mkdocs_value("repo_url"), "GIT_CONFIG_NOSYSTEM": "1"}
    return base, env


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_setup_cell_fetches_the_code_and_the_notebook_imports_it(colab, notebook):
    base, env = colab
    script = base / "work" / f"{notebook.stem}.py"
    script.write_text(setup_cell() + "\n" + "\n".join(imports_of(notebook)) + "\nprint('ROOT', ROOT)\n")
    r = subprocess.run([sys.executable, "-I", str(script)], cwd=base / "work", env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"{notebook.name}: setup or imports failed in a fresh Colab-like process:\n{r.stderr[-3000:]}"
    assert f"ROOT {base / 'home' / 'kb'}" in r.stdout, r.stdout
    assert imports_of(notebook), f"{notebook.name}: no import of its own code found"


def test_a_wrong_address_fails_here(colab):
    base, env = colab
    script = base / "work" / "wrong.py"
    script.write_text(setup_cell("https://github.com/no-such-owner/no-such-repo"))
    r = subprocess.run([sys.executable, "-I", str(script)], cwd=base / "work",
                       env={**env, "HOME": str(base / "elsewhere"), "GIT_TERMINAL_PROMPT": "0"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "git" in r.stderr.lower(), r.stderr[-2000:]
