"""Stale is a state, not a failure (kb/freshness.py): `make check` lists it, `make publish-check` refuses it.

Copies of results/ and of pages are made under tmp_path; one test works on a scratch copy of the repository,
changing one line of a snippet a lab imports and restoring it.
"""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kb import freshness, results

ROOT = Path(__file__).resolve().parents[1]


def _stale_copy(tmp_path, monkeypatch, stem="02-kernel-fusion", file="snippets/fusion/add_layernorm.py") -> Path:
    """results/ copied, with one recorded input hash of `stem` changed: that result is now stale."""
    copy = tmp_path / "results"
    shutil.copytree(ROOT / "results", copy)
    path = copy / "nvidia-h200" / f"{stem}.json"
    text = path.read_text()
    old = re.search(rf'"{re.escape(file)}": "([0-9a-f]{{64}})"', text).group(1)
    path.write_text(text.replace(old, "0" * 64))
    monkeypatch.setattr(results, "RESULTS", copy)
    return copy


def _page(docs: Path, name: str, body: str, labs: list[str]) -> None:
    (docs / "kernels").mkdir(parents=True, exist_ok=True)
    front = "---\ntitle: 问？\nlabs: [" + ", ".join(labs) + "]\n---\n"
    (docs / "kernels" / name).write_text(front + body, encoding="utf-8")


def test_a_stale_result_loads_with_its_state_and_files(tmp_path, monkeypatch):
    _stale_copy(tmp_path, monkeypatch)
    state = freshness.state_of("notebooks/02-kernel-fusion.ipynb")
    assert state.state == "stale" and state.changed == ["snippets/fusion/add_layernorm.py"]
    assert state.result is not None and not state.publishable
    assert results.problems() == []  # still fully verified


def test_the_report_names_each_stale_lab_its_files_and_the_command(tmp_path, monkeypatch):
    _stale_copy(tmp_path, monkeypatch)
    report = freshness.report()
    line = next(ln for ln in report.splitlines() if ln.strip().startswith("02-kernel-fusion"))
    assert "stale (changed since the run: snippets/fusion/add_layernorm.py)" in line, report
    assert re.search(r"\(\d+ quotes\)", line), line
    assert "make gpu-run STALE=1" in report.splitlines()[-1]
    assert "needs 2 GPUs" in next(ln for ln in report.splitlines() if "01-nccl-timeout-lab" in ln)


def test_publish_check_names_page_line_metric_and_lab_for_each_kind(tmp_path, monkeypatch):
    copy = _stale_copy(tmp_path, monkeypatch)
    (copy / "nvidia-h200" / "03-inference-paged-kv.json").unlink()  # missing
    docs = tmp_path / "docs"
    labs = ["notebooks/02-kernel-fusion.ipynb", "notebooks/03-inference-paged-kv.ipynb", "notebooks/00-gpu-ceilings.ipynb"]
    _page(docs, "q.md", "一\n\n<!-- metric 02-kernel-fusion add_layernorm_fwd_speedup_vs_eager -->\n"
                        "<!-- metric 03-inference-paged-kv x_metric -->\n"
                        "<!-- metric 06-moe-rl maxvio_auxfree_final -->\n"
                        "<!-- metric 00-gpu-ceilings copy_bandwidth_gbps -->\n\n<!-- lab-cards -->\n", labs)
    problems = freshness.publish_problems(docs)
    assert "docs/kernels/q.md:7: quotes add_layernorm_fwd_speedup_vs_eager from 02-kernel-fusion (stale, nvidia-h200)" \
        in problems, problems
    assert "docs/kernels/q.md:8: quotes x_metric from 03-inference-paged-kv (missing, nvidia-h200)" in problems
    assert "docs/kernels/q.md:9: quotes maxvio_auxfree_final from 06-moe-rl (stale, nvidia-h200)" in problems
    assert "docs/kernels/q.md:12: its lab card shows 02-kernel-fusion (stale, nvidia-h200)" in problems
    assert not any("00-gpu-ceilings" in p for p in problems), "a fresh result is publishable"
    assert "docs/labs/03-inference-paged-kv.ipynb: the lab page shows 03-inference-paged-kv (missing, nvidia-h200)" \
        in problems
    why = {p.split(":", 1)[0]: p for p in problems if " on nvidia-h200: " in p}
    assert "snippets/fusion/add_layernorm.py" in why["02-kernel-fusion on nvidia-h200"]
    assert "recorded before commits were kept" in why["06-moe-rl on nvidia-h200"]
    assert "no GPU result" in why["03-inference-paged-kv on nvidia-h200"]


def test_a_page_without_numbers_that_are_not_fresh_passes(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    _page(docs, "q.md", "<!-- metric 00-gpu-ceilings copy_bandwidth_gbps -->\n\n<!-- lab-cards -->\n",
          ["notebooks/00-gpu-ceilings.ipynb"])
    monkeypatch.setattr(freshness, "lab_states", lambda gpu=None: [])  # lab pages apart
    assert freshness.publish_problems(docs) == []
    _page(docs, "q.md", "<!-- metric 99-no-such-lab a_metric -->\n", [])
    assert freshness.publish_problems(docs) == ["docs/kernels/q.md:5: shows a_metric of notebooks/99-no-such-lab.ipynb, "
                                                "which does not exist"]


def test_a_lab_index_shows_every_lab_and_non_question_lab_cards_none(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# 首页\n\n<!-- lab-index -->\n<!-- lab-cards -->\n", encoding="utf-8")
    found = freshness.shown(docs)
    assert {s.lab for s in found} == {f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert {(s.line, s.what) for s in found} == {(3, "lab card")}


def test_publish_check_command_fails_naming_them_and_passes_when_all_fresh(monkeypatch, capsys):
    monkeypatch.setattr(freshness, "publish_problems", lambda docs=None: ["docs/x.md:3: quotes a from 02-x (stale, g)"])
    assert freshness.main(["--publish-check"]) == 1
    err = capsys.readouterr().err
    assert "1 place(s)" in err and "docs/x.md:3: quotes a from 02-x (stale, g)" in err and "STALE=1" in err
    monkeypatch.setattr(freshness, "publish_problems", lambda docs=None: [])
    assert freshness.main(["--publish-check"]) == 0
    with pytest.raises(SystemExit):
        freshness.main([])


def test_the_real_site_is_refused_for_exactly_the_labs_that_are_not_fresh():
    behind = {s.stem for s in freshness.lab_states() if not s.publishable}
    problems = freshness.publish_problems()
    named = {m.group(1) for p in problems for m in [re.search(r"(\d\d-[a-z0-9-]+) on nvidia-h200: ", p)] if m}
    assert named == behind


def _scratch(tmp_path: Path) -> Path:
    """The files kb/ reads, copied into a scratch repository."""
    dest = tmp_path / "repo"
    for name in ("kb", "schemas", "snippets", "notebooks", "results", "docs"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _freshness(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kb.freshness", *args], cwd=repo, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(repo)}, timeout=120)


@pytest.mark.slow
def test_changing_one_line_of_a_snippet_stales_its_lab_until_restored(tmp_path):
    repo = _scratch(tmp_path)
    snippet = repo / "snippets/ceilings/__init__.py"
    if not snippet.is_file():
        pytest.skip("lab 00 imports no snippets/ceilings/__init__.py")
    before = _freshness(repo, "--report")
    assert before.returncode == 0 and "00-gpu-ceilings" not in before.stdout, before.stdout + before.stderr
    original = snippet.read_text()
    snippet.write_text(original + "# one more line\n")
    report = _freshness(repo, "--report")
    line = next(ln for ln in report.stdout.splitlines() if ln.strip().startswith("00-gpu-ceilings"))
    assert "snippets/ceilings/__init__.py" in line and "stale" in line
    gate = _freshness(repo, "--publish-check")
    assert gate.returncode == 1
    assert re.search(r"docs/[a-z]+/[a-z-]+\.md:\d+: quotes \w+ from 00-gpu-ceilings \(stale, nvidia-h200\)", gate.stderr)
    snippet.write_text(original)
    assert "00-gpu-ceilings" not in _freshness(repo, "--report").stdout
    assert "00-gpu-ceilings" not in _freshness(repo, "--publish-check").stderr
