"""GPU results are verified, not trusted (kb/results.py): each kind of bad contribution fails, naming file and field.

Broken copies are built under tmp_path with kb.results.RESULTS pointed there; nothing here executes a notebook.
"""
import json
import shutil
from pathlib import Path

import pytest

from kb import results
from kb.labs import LabError, lab_meta
from kb.results import METRIC_MIME, ResultError, load

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "results"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

# Recorded on two H200s before commits were kept (results/legacy.yml); re-running them needs two GPUs.
LEGACY = {"01-nccl-timeout-lab", "06-moe-rl"}
# A lab's full run fits one 10-minute GPU job with margin (kb/rerecord.py); these ran longer and are
# re-recorded within it next. Whoever re-records one removes it here (the test below then checks it).
OVER_LIMIT_UNTIL_RERUN: set[str] = set()


# The real results.

def test_every_real_result_verifies():
    assert results.problems() == []


@pytest.mark.parametrize("stem", sorted(LEGACY))
def test_legacy_results_verify_as_legacy(stem):
    result = results.result_for(stem)
    assert result is not None and result.legacy and result.gpu == "nvidia-h200" and result.commit is None
    assert result.data["device"]["count"] >= 2


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_each_lab_is_fresh_stale_legacy_or_missing_never_unverified(path):
    """A state the site shows and `make publish-check` judges; only a result that does not verify fails here."""
    from kb.freshness import state_of

    state = state_of(f"notebooks/{path.name}")
    assert state.state in {"fresh", "stale", "legacy", "missing"}, f"{path.name}: {state.state}: {state.why}"


@pytest.mark.parametrize("path", sorted(REAL.glob("*/*.json")), ids=lambda p: p.stem)
def test_each_full_run_fits_one_gpu_job(path):
    from kb.rerecord import MAX_LAB_S

    seconds = results.load(path).data["seconds"]
    if path.stem in OVER_LIMIT_UNTIL_RERUN:
        assert seconds > MAX_LAB_S, f"{path.stem} now runs in {seconds} s: remove it from OVER_LIMIT_UNTIL_RERUN"
        return
    assert seconds <= MAX_LAB_S, f"{path}: seconds = {seconds}, over the {MAX_LAB_S} s a lab's full run may take " \
                                 "(one 10-minute GPU job with margin): split or trim the lab"


def test_result_for_and_all_results_take_only_full_results(tmp_path, monkeypatch):
    root = tmp_path / "results"
    path = make_result(root, "02-kernel-fusion")
    monkeypatch.setattr(results, "RESULTS", root)
    (root / "nvidia-h200" / "partial").mkdir()
    shutil.copy(path, root / "nvidia-h200" / "partial" / path.name)  # partial/ is never read
    assert [r.path for r in results.all_results()] == [path]
    assert results.result_for("notebooks/02-kernel-fusion.ipynb").path == path
    assert results.result_for("02-kernel-fusion", gpu="nvidia-a100") is None
    assert results.DEFAULT_GPU == "nvidia-h200" and results.problems() == []


def test_show_displays_verified_results(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj.data))
    results.show("01-nccl-timeout-lab", "needs 2 GPU(s), this machine has 1", lang="en")
    assert "skipped here" in shown[0] and "needs 2 GPU(s)" in shown[0]
    assert "NVIDIA H200 ×2" in shown[1] and "| Metric | Value |" in shown[1]


def test_kb_results_imports_no_site_or_lab_code():
    import subprocess
    import sys

    code = ("import sys, kb.results, kb.labs, kb.gpu_run; "
            "bad = [m for m in sys.modules if m.split('.')[0] in {'mkdocs', 'torch', 'triton', 'snippets', 'tools'}]; "
            "print(bad); sys.exit(bool(bad))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


# A valid result, built from a real one, then broken one way at a time.

def fresh_inputs(data: dict) -> dict:
    """The recorded inputs and everything the notebook imports today, with today's hashes: a copy that is
    fresh whatever has changed in the repository since the real result was recorded."""
    from kb.labs import sha256, snippet_closure

    files = set(data["inputs"]) | snippet_closure(ROOT / data["notebook"]) | {data["notebook"]}
    return {p: sha256(ROOT / p) for p in sorted(files) if (ROOT / p).is_file()}


def make_result(root: Path, stem: str, slug: str = "nvidia-h200") -> Path:
    """Copy results/nvidia-h200/<stem>.json under root/<slug>/ with full provenance, beside an executed notebook
    that recorded exactly its metrics."""
    data = json.loads((REAL / "nvidia-h200" / f"{stem}.json").read_text())
    data.update(commit="a" * 40, tree_clean=True, inputs_hashed="before-run")
    data["inputs"] = fresh_inputs(data)
    outputs = [{"output_type": "display_data", "metadata": {},
                "data": {METRIC_MIME: {"name": k, "value": v, "unit": data["labels"][k]["unit"]}, "text/plain": k}}
               for k, v in data["metrics"].items()]
    nb = {"cells": [{"cell_type": "code", "execution_count": 1, "metadata": {}, "source": "", "outputs": outputs}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    dest = root / slug
    dest.mkdir(parents=True, exist_ok=True)
    write(dest / f"{stem}.json", data)
    write(dest / f"{stem}.ipynb", nb)
    return dest / f"{stem}.json"


def write(path: Path, obj) -> None:
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n")


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    write(path, data)


@pytest.fixture
def good(tmp_path, monkeypatch):
    root = tmp_path / "results"
    monkeypatch.setattr(results, "RESULTS", root)
    path = make_result(root, "02-kernel-fusion")
    assert load(path).fresh is not None  # the unbroken copy verifies
    return path


def fails(path: Path, *words: str) -> str:
    with pytest.raises(ResultError) as e:
        load(path)
    message = str(e.value)
    assert message.startswith(f"results/{path.parent.name}/{path.name}: "), message
    for w in words:
        assert w in message, message
    assert isinstance(e.value, LabError)
    return message


def test_metric_edited_by_hand(good):
    name, value = next(iter(json.loads(good.read_text())["metrics"].items()))
    edit(good, lambda d: d["metrics"].update({name: 1.5}))
    assert fails(good, f"metrics.{name}") == (
        f"results/nvidia-h200/02-kernel-fusion.json: metrics.{name} = 1.5 but the executed notebook recorded {value}")


def test_an_input_dropped_from_the_json(good):
    """Cutting a file out of `inputs` would hide every later change to it: the result would stay 'fresh'."""
    edit(good, lambda d: d["inputs"].pop("snippets/fusion/add_layernorm.py"))
    fails(good, "inputs lack snippets/fusion/add_layernorm.py", "notebooks/02-kernel-fusion.ipynb imports")
    edit(good, lambda d: d["inputs"].pop("snippets/common/record.py"))
    fails(good, "snippets/common/record.py")


def test_metric_dropped_from_the_json(good):
    name = next(iter(json.loads(good.read_text())["metrics"]))
    edit(good, lambda d: (d["metrics"].pop(name), d["labels"].pop(name)))
    fails(good, "metrics lacks", name)


def test_metric_added_to_the_json(good):
    edit(good, lambda d: (d["metrics"].update(made_up=2.0), d["labels"].update(made_up={"unit": "", "zh": "x",
                                                                                         "en": "x"})))
    fails(good, "metrics.made_up", "no such metric")


def test_result_moved_to_another_gpus_folder(good):
    other = good.parent.parent / "nvidia-a100-sxm4-80gb"
    other.mkdir()
    for p in (good, good.with_suffix(".ipynb")):
        p.rename(other / p.name)
    fails(other / good.name, "device.name", "results/nvidia-h200/")


def test_cpu_smoke_result(tmp_path, monkeypatch):
    root = tmp_path / "results"
    monkeypatch.setattr(results, "RESULTS", root)
    path = make_result(root, "02-kernel-fusion", slug="cpu-x86-64")
    edit(path, lambda d: (d.update(lab_mode="smoke"),
                          d["device"].update(name="CPU (x86_64)", count=0, cuda=None, capability=None, driver=None)))
    fails(path, "device.name", "GPU results only")


def test_smoke_result_on_a_gpu(good):
    edit(good, lambda d: d.update(lab_mode="smoke"))
    fails(good, "lab_mode = 'smoke'")


def test_partial_result_in_the_full_folder(good):
    edit(good, lambda d: d.update(lab_mode="partial"))
    fails(good, "lab_mode = 'partial'")


def test_one_gpu_result_of_a_two_gpu_lab(tmp_path, monkeypatch):
    root = tmp_path / "results"
    monkeypatch.setattr(results, "RESULTS", root)
    path = make_result(root, "01-nccl-timeout-lab")
    load(path)
    edit(path, lambda d: d["device"].update(count=1))
    fails(path, "device.count = 1", "requires 2 GPU(s)")


@pytest.mark.parametrize("field, change, words", [
    ("commit", lambda d: d.pop("commit"), ["commit = None"]),
    ("commit", lambda d: d.update(commit=None), ["commit = None"]),
    ("tree_clean", lambda d: d.update(tree_clean=False), ["tree_clean = False"]),
    ("tree_clean", lambda d: d.pop("tree_clean"), ["tree_clean = None"]),
    ("inputs_hashed", lambda d: d.pop("inputs_hashed"), ["inputs_hashed = None", "before-run"]),
])
def test_provenance_missing(good, field, change, words):
    edit(good, change)
    fails(good, *words)


@pytest.fixture
def legacy(tmp_path, monkeypatch):
    """The real legacy result of lab 01 and results/legacy.yml under a temporary results root."""
    root = tmp_path / "results"
    (root / "nvidia-h200").mkdir(parents=True)
    monkeypatch.setattr(results, "RESULTS", root)
    shutil.copy(REAL / "legacy.yml", root / "legacy.yml")
    for suffix in (".json", ".ipynb"):
        shutil.copy(REAL / "nvidia-h200" / f"01-nccl-timeout-lab{suffix}", root / "nvidia-h200")
    path = root / "nvidia-h200" / "01-nccl-timeout-lab.json"
    assert load(path).legacy
    return path


def test_legacy_result_whose_bytes_changed(legacy):
    legacy.write_bytes(legacy.read_bytes().replace(b'"seconds": ', b'"seconds":  '))  # same data, other bytes
    fails(legacy, "sha256", "legacy")


def test_legacy_result_with_a_metric_edited(legacy):
    edit(legacy, lambda d: d["metrics"].update(scenarios_diagnosed_fraction=0.5))
    fails(legacy, "sha256", "legacy")


def test_legacy_executed_notebook_changed(legacy):
    nb = legacy.with_suffix(".ipynb")
    nb.write_bytes(nb.read_bytes() + b"\n")
    fails(legacy, "notebook_sha256")


def test_legacy_listing_does_not_exempt_from_the_other_checks(legacy, monkeypatch):
    """A listed result whose metric the notebook never printed still fails, even with matching hashes."""
    edit(legacy, lambda d: d["metrics"].update(scenarios_diagnosed_fraction=0.5))
    entries = (legacy.parent.parent / "legacy.yml").read_text().replace(
        results.sha256(REAL / "nvidia-h200" / "01-nccl-timeout-lab.json"), results.sha256(legacy))
    (legacy.parent.parent / "legacy.yml").write_text(entries)
    fails(legacy, "metrics.scenarios_diagnosed_fraction = 0.5", "never printed")


def test_legacy_file_listing_a_missing_result(legacy):
    legacy.unlink()
    assert any("legacy.yml: lists results/nvidia-h200/01-nccl-timeout-lab.json" in p for p in results.problems())


def test_stale_result_loads_with_its_stale_files(good):
    first = next(iter(json.loads(good.read_text())["inputs"]))
    edit(good, lambda d: d["inputs"].update({first: "0" * 64}))
    result = load(good)
    assert not result.fresh and first in result.stale


@pytest.mark.parametrize("breakage, words", [
    (lambda d: d.pop("device"), ["device", "required"]),
    (lambda d: d["inputs"].update({"notebooks/x.ipynb": "not-a-hash"}), ["inputs"]),
    (lambda d: d["metrics"].update({"Bad Name": 1.0}), ["metrics"]),
    (lambda d: d.update(executed_at="yesterday"), ["executed_at"]),
    (lambda d: d["labels"].clear(), ["without labels"]),
    (lambda d: d.update(inputs_hashed="after-run"), ["inputs_hashed"]),
    (lambda d: d.update(commit="abc"), ["commit"]),
])
def test_result_breaking_the_schema(good, breakage, words):
    edit(good, breakage)
    fails(good, *words)


def test_result_that_is_not_json(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    bad = tmp_path / "nvidia-h200" / "00-x.json"
    bad.parent.mkdir()
    bad.write_text('{"notebook": ')
    with pytest.raises(ResultError, match="^results/nvidia-h200/00-x.json: not readable JSON"):
        load(bad)


def test_a_rewrite_of_the_same_size_is_verified_again(good):
    """Results are validated once per distinct text: a change that keeps the size and lands within the
    file system's timestamp granularity is still read and verified."""
    text = good.read_text()
    assert load(good).fresh is not None
    good.write_text(text.replace('"lab_mode": "full"', '"lab_mode": "fu11"'))  # same size, breaks the schema
    assert good.stat().st_size == len(text.encode())
    fails(good, "lab_mode")


def test_an_input_changed_in_place_makes_the_result_stale(good, tmp_path, monkeypatch):
    """A same-size edit of an input, moments after it was hashed, is seen: inputs are hashed on every load."""
    data = json.loads(good.read_text())
    copy = tmp_path / "snippet.py"
    copy.write_text("x = 1\n")
    monkeypatch.setattr(results, "ROOT", tmp_path)
    data["inputs"] = {"snippet.py": results.sha256(copy)}
    assert results._stale(data) == []
    copy.write_text("x = 2\n")
    assert results._stale(data) == ["snippet.py"]
