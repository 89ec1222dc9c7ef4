"""Lab notebooks are stored clean and share their setup (their GPU results: tests/test_results.py)."""
from pathlib import Path

import nbformat
import pytest

from kb import labs
from kb.lab_cells import ENV_CELL, setup_cell
from kb.labs import LabError, lab_meta

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
IDS = [p.name for p in NOTEBOOKS]


def outputs_in(path: Path) -> list[int]:
    nb = labs.read_notebook(path)
    return [i for i, c in enumerate(nb["cells"]) if c.get("cell_type") == "code"
            and (c.get("outputs") or c.get("execution_count") is not None)]


def test_there_is_a_lab():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_is_stored_without_outputs(path):
    assert outputs_in(path) == [], f"{path.name}: cells {outputs_in(path)} hold outputs; results/ holds those"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_shares_setup_parameters_and_environment_cells(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].source == setup_cell(), f"{path.name}: first code cell must be kb.lab_cells.setup_cell()"
    assert code[-1].source == ENV_CELL, f"{path.name}: last cell must be kb.lab_cells.ENV_CELL"
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1
    assert labs.title_zh(nb), f"{path.name}: needs a '# ' title in a markdown cell"
    lab_meta(path)


def test_notebook_with_outputs_is_caught(tmp_path):
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="hello")]
    path = tmp_path / "00-dirty.ipynb"
    nbformat.write(nb, path)
    assert outputs_in(path) == [1]


def test_malformed_notebook_and_metadata(tmp_path):
    bad = tmp_path / "01-broken.ipynb"
    bad.write_text("{ not json")
    with pytest.raises(LabError, match="01-broken.ipynb: not a readable notebook"):
        lab_meta(bad)
    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    nb.metadata["kb"]["requires"]["gpus"] = "two"
    nbformat.write(nb, bad)
    with pytest.raises(LabError, match=r"01-broken.ipynb: metadata.kb.requires.gpus"):
        lab_meta(bad)
