"""Lab notebooks are stored clean and share their setup; GPU results follow the contract and are fresh."""
import json
import shutil
from pathlib import Path

import nbformat
import pytest

from tools import labs
from tools.lab_cells import ENV_CELL, setup_cell
from tools.labs import LabError, lab_meta, load_result

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
    assert code[0].source == setup_cell(), f"{path.name}: first code cell must be tools.lab_cells.setup_cell()"
    assert code[-1].source == ENV_CELL, f"{path.name}: last cell must be tools.lab_cells.ENV_CELL"
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1
    assert labs.title_zh(nb), f"{path.name}: needs a '# ' title in a markdown cell"
    lab_meta(path)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_published_lab_has_a_fresh_gpu_result(path):
    if not lab_meta(path).published:
        pytest.skip(f"{path.name} is not published yet (metadata.kb.published is false)")
    result = labs.newest_result(f"notebooks/{path.name}")
    assert result is not None, f"{path.name}: published but results/ has no GPU result: run `make gpu-run`"
    assert result.fresh, f"{result.path}: stale, inputs changed since the GPU run: {result.stale}"
    assert result.data["lab_mode"] == "full" and result.data["device"]["count"] >= 1


def test_every_result_follows_the_contract_and_is_fresh():
    for result in labs.all_results():
        assert result.fresh, f"{labs.rel(result.path)}: stale, changed since the GPU run: {result.stale}"
        assert (ROOT / result.data["notebook"]).is_file(), f"{result.path}: its notebook is gone"


# Broken fixtures: each must fail loudly, naming the file and the problem.

@pytest.fixture
def results_dir(tmp_path, monkeypatch):
    """A copy of the newest real result under a temporary results/ root."""
    real = labs.all_results()
    if not real:
        pytest.skip("no GPU result yet to copy")
    src = real[0]
    dest = tmp_path / "results" / src.path.parent.name
    dest.mkdir(parents=True)
    shutil.copy(src.path, dest / src.path.name)
    shutil.copy(src.notebook_path, dest / src.notebook_path.name)
    return dest / src.path.name


def test_stale_result_is_reported(results_dir):
    data = json.loads(results_dir.read_text())
    first = next(iter(data["inputs"]))
    data["inputs"][first] = "0" * 64
    results_dir.write_text(json.dumps(data))
    result = load_result(results_dir)
    assert not result.fresh and result.stale == [first]


@pytest.mark.parametrize("breakage, words", [
    (lambda d: d.pop("device"), ["device", "required"]),
    (lambda d: d["inputs"].update({"notebooks/x.ipynb": "not-a-hash"}), ["inputs"]),
    (lambda d: d["metrics"].update({"Bad Name": 1.0}), ["metrics"]),
    (lambda d: d.update(executed_at="yesterday"), ["executed_at"]),
    (lambda d: d["labels"].clear(), ["without labels"]),
])
def test_result_breaking_the_contract(results_dir, breakage, words):
    data = json.loads(results_dir.read_text())
    breakage(data)
    results_dir.write_text(json.dumps(data))
    with pytest.raises(LabError) as e:
        load_result(results_dir)
    assert results_dir.name in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_result_that_is_not_json(tmp_path):
    bad = tmp_path / "00-x.json"
    bad.write_text('{"notebook": ')
    with pytest.raises(LabError, match="00-x.json: not readable JSON"):
        load_result(bad)


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
