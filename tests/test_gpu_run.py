"""tools/gpu_run.py on CPU fixtures: results follow the contract; a failure names the cell and keeps old results."""
import json
from pathlib import Path

import nbformat
import pytest

from tools import gpu_run, labs
from kb.new_question import notebook

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A scaffolded lab at notebooks/90-fixture-lab.ipynb inside the repository (removed afterwards)."""
    path = ROOT / "notebooks" / "90-fixture-lab.ipynb"
    nbformat.write(notebook("固定装置", "Fixture"), path)
    yield path
    path.unlink(missing_ok=True)


def test_run_writes_result_and_notebook(lab, tmp_path, capsys):
    assert gpu_run.main([str(lab), "--mode", "smoke", "--out", str(tmp_path), "--allow-cpu"]) == 0
    written = list(tmp_path.glob("*/90-fixture-lab.json"))
    assert len(written) == 1
    monkey_root = written[0]
    data = json.loads(monkey_root.read_text())
    assert data["notebook"] == "notebooks/90-fixture-lab.ipynb"
    assert set(data["inputs"]) >= {"notebooks/90-fixture-lab.ipynb", "snippets/common/record.py",
                                    "snippets/common/timing.py", "snippets/common/env.py"}
    assert data["inputs"]["notebooks/90-fixture-lab.ipynb"] == labs.sha256(lab)
    assert data["metrics"]["example_gbps"] > 0
    assert data["lab_mode"] == "smoke"
    result = labs.load_result(monkey_root)  # the contract's schema and freshness
    assert result.fresh
    executed = nbformat.read(monkey_root.with_suffix(".ipynb"), as_version=4)
    assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code")


def test_failing_cell_stops_the_run_and_keeps_earlier_results(lab, tmp_path, capsys):
    assert gpu_run.main([str(lab), "--mode", "smoke", "--out", str(tmp_path), "--allow-cpu"]) == 0
    old = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    nb = nbformat.read(lab, as_version=4)
    nb.cells.insert(3, nbformat.v4.new_code_cell("x = 1\n1 / 0"))
    nbformat.write(nb, lab)
    assert gpu_run.main([str(lab), "--mode", "smoke", "--out", str(tmp_path), "--allow-cpu"]) == 1
    err = capsys.readouterr().err
    assert "notebooks/90-fixture-lab.ipynb: cell 3" in err and "ZeroDivisionError" in err, err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == old


def test_refuses_to_run_without_a_gpu(lab, tmp_path, capsys):
    assert gpu_run.main([str(lab), "--out", str(tmp_path)]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_malformed_notebook_is_named(tmp_path, capsys):
    bad = ROOT / "notebooks" / "91-broken.ipynb"
    bad.write_text("{ this is not json")
    try:
        assert gpu_run.main([str(bad), "--mode", "smoke", "--out", str(tmp_path), "--allow-cpu"]) == 1
    finally:
        bad.unlink()
    assert "notebooks/91-broken.ipynb: not a readable notebook" in capsys.readouterr().err


def test_compiled_sources_are_inputs_too():
    from tools.gpu_run import with_sources

    files = with_sources(["snippets/__init__.py", "snippets/fusion/add_layernorm_cuda.py"])
    assert {"snippets/fusion/csrc/add_layernorm.cu", "snippets/fusion/csrc/philox.cuh",
            "snippets/fusion/csrc/add_layernorm.h"} <= set(files)
    assert with_sources(["snippets/common/record.py"]) == ["snippets/common/record.py"]
