"""Stale is a state, not a failure (kb/freshness.py): `make check` lists it, `make publish-check` refuses it.

Copies of results/ and of pages are made under tmp_path; one test works on a scratch copy of the repository,
changing one line of a snippet a lab imports and restoring it.
"""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kb import freshness, results
from tests.test_results import fresh_inputs

ROOT = Path(__file__).resolve().parents[1]


def _stale_copy(tmp_path, monkeypatch, stem="02-kernel-fusion", file="snippets/fusion/add_layernorm.py") -> Path:
    """results/ copied, with `stem`'s inputs today's files except one: that result is stale for that file alone."""
    copy = tmp_path / "results"
    shutil.copytree(ROOT / "results", copy)
    path = copy / "nvidia-h200" / f"{stem}.json"
    data = json.loads(path.read_text())
    data["inputs"] = {**fresh_inputs(data), file: "0" * 64}  # fresh but for that one file
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
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


def _stale_on_another_gpu(tmp_path, monkeypatch) -> None:
    """results/ copied, with lab 02 also recorded on an 'NVIDIA H100' whose copy is stale."""
    copy = _stale_copy(tmp_path, monkeypatch)
    other = copy / "nvidia-h100"
    other.mkdir()
    shutil.copy(copy / "nvidia-h200/02-kernel-fusion.ipynb", other)
    data = json.loads((copy / "nvidia-h200/02-kernel-fusion.json").read_text())
    data["device"]["name"] = "NVIDIA H100"
    (other / "02-kernel-fusion.json").write_text(json.dumps(data))
    # lab 02 on the H200 is made fresh again, so only the H100's copy is stale
    fresh = json.loads((copy / "nvidia-h200/02-kernel-fusion.json").read_text())
    fresh["inputs"] = fresh_inputs(fresh)
    (copy / "nvidia-h200/02-kernel-fusion.json").write_text(json.dumps(fresh))


QUOTE = "<!-- metric 02-kernel-fusion add_layernorm_fwd_speedup_vs_eager -->"


@pytest.mark.parametrize("head", [
    "---\ngpu: nvidia-h100\n---\n",            # the usual front matter
    "\ufeff---\ngpu: nvidia-h100\n---\n",      # with a byte-order mark, which MkDocs strips
    "--- \ngpu: nvidia-h100\n...\n",           # a trailing space, closed by '...'
    "gpu: nvidia-h100\n\n",                    # MultiMarkdown-style meta
])
def test_the_gate_reads_a_pages_gpu_as_mkdocs_does(tmp_path, monkeypatch, head):
    _stale_on_another_gpu(tmp_path, monkeypatch)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "about.md").write_text(head + "# 关于\n\n" + QUOTE + "\n", encoding="utf-8")
    problems = freshness.publish_problems(docs)
    assert any(p.startswith("docs/about.md:") and "(stale, nvidia-h100)" in p for p in problems), problems
    report = freshness.report(docs)
    assert "02-kernel-fusion on nvidia-h100" in report, report


def test_a_comment_opened_in_the_front_matter_hides_no_marker(tmp_path, monkeypatch):
    _stale_on_another_gpu(tmp_path, monkeypatch)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "about.md").write_text('---\ndescription: "a shortcode opens with <!-- and names a lab"\n---\n# 关于\n\n'
                                   + QUOTE.replace(" -->", " gpu=nvidia-h100 -->") + "\n", encoding="utf-8")
    assert any(p.startswith("docs/about.md:6: quotes") for p in freshness.publish_problems(docs))


def test_every_markdown_file_mkdocs_renders_is_read_through_links_too(tmp_path, monkeypatch):
    _stale_on_another_gpu(tmp_path, monkeypatch)
    docs, beside = tmp_path / "docs", tmp_path / "beside"
    docs.mkdir()
    beside.mkdir()
    quote = QUOTE.replace(" -->", " gpu=nvidia-h100 -->") + "\n"
    (docs / "extra.markdown").write_text(quote)
    (beside / "README.md").write_text(quote)
    (docs / "labs").symlink_to(beside, target_is_directory=True)
    pages = {p.split(":")[0] for p in freshness.publish_problems(docs) if "(stale, nvidia-h100)" in p}
    assert pages == {"docs/extra.markdown", "docs/labs/README.md"}


@pytest.mark.parametrize("text, words", [
    ("---\ngpu: 5\n---\n# x\n", "docs/x.md: front matter gpu = 5"),
    ("---\ngpu: [a]\n---\n# x\n", "docs/x.md: front matter gpu = ['a']"),
    ("<!-- metric 02-kernel-fusion -->\n", "docs/x.md:1:"),
])
def test_a_page_it_cannot_read_is_named_not_a_traceback(tmp_path, monkeypatch, capsys, text, words):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.md").write_text(text, encoding="utf-8")
    monkeypatch.setattr(freshness, "shown", lambda d=None, _s=freshness.shown: _s(docs))
    for flag in ("--report", "--publish-check"):
        assert freshness.main([flag]) == 2
        assert words in capsys.readouterr().err


def test_a_page_that_is_not_utf8_is_named(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "x.md").write_bytes(b"\xff\xfe# x\n")
    with pytest.raises(freshness.FreshnessError, match="docs/x.md: not readable as UTF-8"):
        freshness.shown(docs)


def test_a_shell_cell_has_no_imports_and_a_broken_cell_is_named():
    from kb.labs import LabError, imported_modules

    assert imported_modules("%%bash\nfrom snippets import x\nls -l (\n") == set()
    assert imported_modules("%%time\nfrom snippets.common import record\n") >= {"snippets.common"}
    with pytest.raises(LabError, match="a code cell is not Python"):
        imported_modules("def (:\n")


def test_a_result_file_included_as_text_is_judged_like_a_quote(tmp_path, monkeypatch):
    _stale_on_another_gpu(tmp_path, monkeypatch)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "about.md").write_text('# 关于\n\n```json\n--8<-- "results/nvidia-h100/02-kernel-fusion.json"\n```\n')
    problems = freshness.publish_problems(docs)
    assert "docs/about.md:4: includes the result file of 02-kernel-fusion (stale, nvidia-h100)" in problems, problems
    (docs / "about.md").write_text('# 关于\n\n```json\n--8<-- "results/nvidia-h200/02-kernel-fusion.json"\n```\n')
    assert not any(p.startswith("docs/about.md") for p in freshness.publish_problems(docs))
