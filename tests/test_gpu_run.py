"""kb/gpu_run.py on CPU fixtures: results follow the contract; a failure names the cell and keeps old results;
unmet hardware needs are refused before anything runs; inputs are hashed before the run."""
import json
import subprocess
from pathlib import Path

import nbformat
import pytest

from kb import gpu_run, labs, results
from kb.new_question import notebook

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """A scaffolded lab at notebooks/90-fixture-lab.ipynb inside the repository (removed afterwards)."""
    path = ROOT / "notebooks" / "90-fixture-lab.ipynb"
    nbformat.write(notebook("固定装置", "Fixture"), path)
    yield path
    path.unlink(missing_ok=True)


@pytest.mark.slow
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
    assert data["inputs_hashed"] == "before-run" and data["tree_clean"] is False  # the fixture lab is uncommitted
    assert len(data["commit"]) == 40
    executed = nbformat.read(monkey_root.with_suffix(".ipynb"), as_version=4)
    assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code")
    # record.metric wrote the exact value into the cell output, which kb.results compares the JSON with
    assert results.notebook_metrics(json.loads(monkey_root.with_suffix(".ipynb").read_text())) == data["metrics"]
    with pytest.raises(results.ResultError, match="GPU results only"):  # a CPU smoke run is never a result
        results.load(monkey_root)


@pytest.mark.slow
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
    from kb.gpu_run import with_sources

    files = with_sources(["snippets/__init__.py", "snippets/fusion/add_layernorm_cuda.py"])
    assert {"snippets/fusion/csrc/add_layernorm.cu", "snippets/fusion/csrc/philox.cuh",
            "snippets/fusion/csrc/add_layernorm.h"} <= set(files)
    assert with_sources(["snippets/common/record.py"]) == ["snippets/common/record.py"]
    assert {"snippets/nccl/messages/en.yml", "snippets/nccl/messages/zh.yml"} <= set(
        with_sources(["snippets/nccl/messages.py"])), "data a module reads at run time is an input too"


def set_needs(lab: Path, gpus: int, capability: str | None = None) -> None:
    nb = nbformat.read(lab, as_version=4)
    nb.metadata["kb"]["requires"] = {"gpus": gpus, "capability": capability}
    nbformat.write(nb, lab)


@pytest.mark.parametrize("gpus, capability, words", [
    (2, None, "needs 2 GPU(s)"), (0, "9.0a", "needs sm_90a"),
])
def test_unmet_needs_are_refused_before_anything_runs(lab, tmp_path, capsys, monkeypatch, gpus, capability, words):
    set_needs(lab, gpus, capability)
    monkeypatch.setattr(gpu_run, "execute", lambda *a, **k: pytest.fail("ran a lab whose needs are unmet"))
    assert gpu_run.main([str(lab), "--mode", "full", "--out", str(tmp_path), "--allow-cpu"]) == 3
    err = capsys.readouterr().err
    assert "notebooks/90-fixture-lab.ipynb" in err and words in err, err
    assert not any(tmp_path.iterdir())


def fake_execute(modules, during=lambda: None):
    def execute(path, mode, record_path, **kw):
        during()
        record = {"metrics": {"x_gbps": 1.0}, "labels": {"x_gbps": {"unit": "GB/s", "zh": "x", "en": "x"}},
                  "tables": {}, "modules": modules}
        return nbformat.v4.new_notebook(), record, 0.1
    return execute


def test_partial_runs_unmet_labs_into_partial(lab, tmp_path, monkeypatch):
    set_needs(lab, 2)
    monkeypatch.setattr(gpu_run, "execute", fake_execute(["snippets/common/record.py"]))
    assert gpu_run.main([str(lab), "--mode", "full", "--out", str(tmp_path), "--allow-cpu", "--partial"]) == 0
    written = list(tmp_path.rglob("*.json"))
    assert [p.relative_to(tmp_path).parts[1:] for p in written] == [("partial", "90-fixture-lab.json")]
    assert json.loads(written[0].read_text())["lab_mode"] == "partial"


def test_allow_cpu_never_writes_into_results(lab, capsys):
    assert gpu_run.main([str(lab), "--mode", "smoke", "--allow-cpu"]) == 2
    assert "--out" in capsys.readouterr().err


@pytest.fixture
def snippet():
    """A snippet file inside the repository (removed afterwards) that a fake run can change."""
    path = ROOT / "snippets" / "common" / "_fixture_changes.py"
    path.write_text("X = 1\n")
    yield path
    path.unlink(missing_ok=True)


def test_input_changed_during_the_run_is_refused(lab, tmp_path, snippet, monkeypatch, capsys):
    modules = ["snippets/common/record.py", "snippets/common/_fixture_changes.py"]
    monkeypatch.setattr(gpu_run, "execute", fake_execute(modules, lambda: snippet.write_text("X = 2\n")))
    assert gpu_run.main([str(lab), "--mode", "smoke", "--out", str(tmp_path), "--allow-cpu"]) == 1
    err = capsys.readouterr().err
    assert "inputs changed during the run (snippets/common/_fixture_changes.py)" in err, err
    assert not any(tmp_path.rglob("*.json"))


def test_inputs_are_the_hashes_taken_before_the_run(lab, tmp_path, snippet, monkeypatch):
    before = labs.sha256(snippet)
    modules = ["snippets/common/record.py", "snippets/common/_fixture_changes.py"]
    monkeypatch.setattr(gpu_run, "execute", fake_execute(modules))
    assert gpu_run.main([str(lab), "--mode", "smoke", "--out", str(tmp_path), "--allow-cpu"]) == 0
    data = json.loads(next(tmp_path.rglob("*.json")).read_text())
    assert data["inputs"]["snippets/common/_fixture_changes.py"] == before
    assert data["inputs_hashed"] == "before-run"


def test_git_blob_matches_git():
    path = ROOT / "snippets" / "common" / "record.py"
    assert gpu_run.git_blob(path) == subprocess.run(["git", "hash-object", str(path)], capture_output=True,
                                                    text=True, cwd=ROOT).stdout.strip()


def test_tree_clean_from_a_manifest_without_git(tmp_path, monkeypatch):
    (tmp_path / "snippets").mkdir()
    f = tmp_path / "snippets" / "a.py"
    f.write_text("A = 1\n")
    manifest = tmp_path / "manifest.txt"
    manifest.write_text(f"100644 {gpu_run.git_blob(f)} 0\tsnippets/a.py\n")
    monkeypatch.setattr(gpu_run, "ROOT", tmp_path)
    monkeypatch.setenv("KB_COMMIT", "b" * 40)
    monkeypatch.setenv("KB_MANIFEST", str(manifest))
    assert gpu_run.provenance(["snippets/a.py"]) == ("b" * 40, True, "")
    f.write_text("A = 2\n")
    commit, clean, why = gpu_run.provenance(["snippets/a.py"])
    assert (commit, clean) == ("b" * 40, False) and "snippets/a.py" in why
    monkeypatch.delenv("KB_MANIFEST")
    assert gpu_run.provenance(["snippets/a.py"])[1] is False
    monkeypatch.setenv("KB_COMMIT", "HEAD")
    assert gpu_run.provenance(["snippets/a.py"])[:2] == (None, False)


def test_a_manifest_wins_over_a_git_folder_of_another_commit(tmp_path, monkeypatch):
    """A GPU machine's copy of the tree may carry a stale .git: KB_COMMIT + KB_MANIFEST decide."""
    inputs = ["snippets/common/timing.py"]
    listing = "".join(f"100644 {gpu_run.git_blob(ROOT / p)} 0\t{p}\n" for p in inputs)
    (tmp_path / "manifest.txt").write_text(listing)
    monkeypatch.setenv("KB_COMMIT", "a" * 40)
    monkeypatch.setenv("KB_MANIFEST", str(tmp_path / "manifest.txt"))
    assert gpu_run.provenance(inputs) == ("a" * 40, True, "")
    (tmp_path / "manifest.txt").write_text(listing.replace(gpu_run.git_blob(ROOT / inputs[0]), "0" * 40))
    commit, clean, why = gpu_run.provenance(inputs)
    assert not clean and "snippets/common/timing.py" in why


def test_notebooks_see_the_manifest_commit_not_the_stale_git(tmp_path, monkeypatch):
    """The environment cell asks git for HEAD; in manifest mode it must print KB_COMMIT, as the JSON does."""
    from snippets.common.env import _run

    (tmp_path / "manifest.txt").write_text("")
    monkeypatch.setenv("KB_COMMIT", "c0ffee" + "1" * 34)
    monkeypatch.setenv("KB_MANIFEST", str(tmp_path / "manifest.txt"))
    monkeypatch.delenv("GIT_DIR", raising=False)
    with gpu_run.commit_for_notebooks():
        assert _run(["git", "rev-parse", "--short=12", "HEAD"]) == "c0ffee111111"
    assert "GIT_DIR" not in __import__("os").environ
    monkeypatch.delenv("KB_MANIFEST")  # outside manifest mode git answers from the repository as before
    with gpu_run.commit_for_notebooks():
        assert _run(["git", "rev-parse", "--short=12", "HEAD"]) != "c0ffee111111"
