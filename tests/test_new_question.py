"""`make new-question` scaffolds a page and a lab that pass every check, in a copy of the repository."""
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import mkdocs_build


ROOT = Path(__file__).resolve().parents[1]


def _copy_repo(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for f in files:
        src = ROOT / f
        if src.is_symlink():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            (dest / f).symlink_to(src.readlink())
        elif src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    (dest / "node_modules").symlink_to(ROOT / "node_modules")
    return dest


def test_scaffolded_question_and_lab_pass_the_checks(tmp_path):
    repo = _copy_repo(tmp_path / "repo")
    r = subprocess.run([sys.executable, "-m", "kb.new_question", "--section", "inference", "--slug",
                        "prefix-caching", "--title", "前缀缓存能省多少计算？", "--tags", "推理,KV 缓存", "--lab"],
                       cwd=repo, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    page = repo / "docs/inference/prefix-caching.md"
    assert page.is_file() and page.with_suffix(".en.md").is_file()
    notebooks = sorted((repo / "notebooks").glob("*-prefix-caching.ipynb"))
    assert len(notebooks) == 1
    checks = subprocess.run([sys.executable, "-c", (
        "from pathlib import Path; from kb.pages import check_page; from kb.labs import lab_meta;"
        "check_page(Path('docs/inference/prefix-caching.md')); check_page(Path('docs/inference/prefix-caching.en.md'));"
        f"lab_meta(Path('{notebooks[0].relative_to(repo)}'))")], cwd=repo, capture_output=True, text=True)
    assert checks.returncode == 0, checks.stderr
    build = mkdocs_build(repo / "mkdocs.yml", tmp_path / "site", cwd=repo)
    assert build.returncode == 0, build.stderr[-3000:]
    assert (tmp_path / "site/inference/prefix-caching/index.html").is_file()
    assert (tmp_path / f"site/labs/{notebooks[0].stem}/index.html").is_file()
    run = subprocess.run([sys.executable, "-m", "kb.gpu_run", str(notebooks[0]), "--mode", "smoke",
                          "--allow-cpu", "--out", str(tmp_path / "results")], cwd=repo, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]


def test_refuses_a_bad_slug_and_an_unknown_tag(tmp_path):
    repo = _copy_repo(tmp_path / "repo")
    for args, words in [(["--slug", "Bad_Slug"], "kebab-case"), (["--slug", "ok", "--tags", "不存在"], "vocabulary")]:
        r = subprocess.run([sys.executable, "-m", "kb.new_question", "--section", "kernels", *args],
                           cwd=repo, capture_output=True, text=True)
        assert r.returncode != 0 and words in r.stderr, r.stderr
