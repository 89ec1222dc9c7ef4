"""`make new-question` scaffolds a page and a lab that pass every check, in a copy of the repository;
its variables reach the program as typed, and it refuses what would break a page or overwrite one."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import mkdocs_build
from kb import new_question
from kb.pages import split_front_matter


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
                        "prefix-caching", "--title", '前缀缓存: 能省多少 "计算" #KV？', "--tags", "推理,KV 缓存", "--lab"],
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
    built = (tmp_path / "site/inference/prefix-caching/index.html").read_text()
    assert '<h1 id="前缀缓存-能省多少-计算-kv">前缀缓存: 能省多少 "计算" #KV？' in built or '前缀缓存: 能省多少 "计算" #KV？</h1>' in built
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


# The front matter comes from a YAML emitter: every title check_title accepts reads back unchanged.

PUNCT = ':#"\'`$|&*_[]{}()!?,.;@%\\/-=+~ 　：＃“”‘’，。？！、；（）「」《》—…'
TITLES = st.text(alphabet=st.one_of(st.sampled_from(PUNCT), st.characters(codec="utf-8", exclude_characters="<>",
                                                                      exclude_categories=("Cc", "Cs", "Co", "Cn",
                                                                                          "Cf", "Zl", "Zp"))),
                 min_size=4, max_size=40).filter(lambda t: len(t.strip()) >= 4)


@settings(max_examples=300, deadline=None)
@given(title=TITLES)
def test_front_matter_round_trips_any_accepted_title(title):
    title = new_question.check_title(title, "--title")
    for lang in ("zh", "en"):
        meta, body = split_front_matter(new_question.page(lang, title, ["推理"], "进阶", ["notebooks/00-x.ipynb"]), "x")
        assert meta == {"title": title, "tags": ["推理"], "difficulty": "进阶", "labs": ["notebooks/00-x.ipynb"]}
        assert body.startswith("\n## ")


@pytest.mark.parametrize("title", ["a: b: c", "C# #hash", "it's \"quoted\"", "值：一个#号", "- list?", "[flow, seq]",
                                   "{a: b}", "!tag x", "&anchor x", "*alias x", "? key", "| block", "> folded x",
                                   "null", "yes", "1.5e3", "---", "... end", "%YAML 1.2", "@at x", "`tick`"])
def test_front_matter_round_trips_yaml_lookalikes(title):
    if "<" in title or ">" in title:
        with pytest.raises(SystemExit, match="< or >"):
            new_question.check_title(title, "--title")
        return
    meta, _ = split_front_matter(new_question.page("zh", title, ["推理"], "进阶", []), "x")
    assert meta["title"] == title


@pytest.mark.parametrize("title, words", [("两行\n标题", "one line"), ("尾部换行\n", "one line"), ("a\rbcd", "one line"),
                                          ("<script>alert(1)</script>", "< or >"), ("a > b？", "< or >"),
                                          ("短", "too short")])
def test_check_title_refuses(title, words):
    with pytest.raises(SystemExit, match=words):
        new_question.check_title(title, "TITLE")


# Refusals in a copy of the repository: nothing is written, nothing is overwritten.

@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return _copy_repo(tmp_path_factory.mktemp("nq") / "repo")


def _snapshot(repo: Path) -> dict:
    return {p: p.read_bytes() for d in ("docs", "notebooks") for p in (repo / d).rglob("*") if p.is_file()} | {
        repo / "mkdocs.yml": (repo / "mkdocs.yml").read_bytes()}


def _scaffold(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kb.new_question", *args], cwd=repo, capture_output=True, text=True)


@pytest.mark.parametrize("title, words", [("第一行\n---\nsource: 000_ab.txt", "one line"),
                                          ("<script>alert(1)</script>是什么？", "< or >")])
def test_refuses_a_title_that_would_inject_front_matter_or_markup(repo, title, words):
    before = _snapshot(repo)
    for option in ("--title", "--title-en"):
        r = _scaffold(repo, "--section", "kernels", "--slug", "bad-title", option, title)
        assert r.returncode != 0 and words in r.stderr and option in r.stderr, r.stderr
    assert _snapshot(repo) == before


@pytest.mark.parametrize("planted", ["docs/kernels/only-en.en.md", "docs/kernels/only-en.md",
                                     "notebooks/42-only-en.ipynb"])
def test_refuses_to_overwrite_either_page_or_the_lab(repo, planted):
    (repo / planted).write_text("mine\n")
    try:
        before = _snapshot(repo)
        r = _scaffold(repo, "--section", "kernels", "--slug", "only-en", "--lab")
        assert r.returncode != 0 and planted in r.stderr and "nothing written" in r.stderr, r.stderr
        assert _snapshot(repo) == before
    finally:
        (repo / planted).unlink()


# Through make: the variables reach the program as typed, and no shell or make function interprets them.

PAYLOADS = ['"; touch PWNED; echo "', "$(touch PWNED)", "`touch PWNED`", "$(shell touch PWNED)", "'; touch PWNED; '",
            "$$(touch PWNED) && touch PWNED"]


def _make(repo: Path, *assignments: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SECTION", "SLUG", "TITLE", "TITLE_EN", "LAB")}
    return subprocess.run(["make", "--no-print-directory", "-o", "setup", f"BIN={Path(sys.executable).parent}",
                           "new-question", *assignments], cwd=repo, capture_output=True, text=True, env=env)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")
@pytest.mark.parametrize("payload", PAYLOADS)
def test_make_refuses_a_hostile_slug_without_running_it(repo, payload):
    before = _snapshot(repo)
    r = _make(repo, "SECTION=kernels", f"SLUG={payload}")
    assert r.returncode != 0 and "must be kebab-case" in r.stderr and repr(payload) in r.stderr, r.stderr
    assert not list(repo.rglob("PWNED")) and not (repo.parent / "PWNED").exists()
    assert _snapshot(repo) == before


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")
def test_make_passes_titles_byte_for_byte(repo):
    title = "注入：" + " ".join(PAYLOADS) + " #标签 'x' \\n？"
    title_en = "Injection: " + " ".join(reversed(PAYLOADS)) + ' "quoted" # not a comment?'
    nav = (repo / "mkdocs.yml").read_bytes()
    r = _make(repo, "SECTION=kernels", "SLUG=make-titles", f"TITLE={title}", f"TITLE_EN={title_en}", "LAB=1")
    try:
        assert r.returncode == 0, r.stderr
        assert not list(repo.rglob("PWNED")) and not (repo.parent / "PWNED").exists()
        zh, _ = split_front_matter((repo / "docs/kernels/make-titles.md").read_text(encoding="utf-8"), "zh")
        en, _ = split_front_matter((repo / "docs/kernels/make-titles.en.md").read_text(encoding="utf-8"), "en")
        assert (zh["title"], en["title"]) == (title, title_en)
        assert zh["labs"] == en["labs"] and len(zh["labs"]) == 1 and zh["labs"][0].endswith("-make-titles.ipynb")
        again = _make(repo, "SECTION=kernels", "SLUG=make-titles")
        assert again.returncode != 0 and "already exist" in again.stderr
    finally:
        (repo / "mkdocs.yml").write_bytes(nav)  # the module's copy goes back to how it was
        for p in [repo / "docs/kernels/make-titles.md", repo / "docs/kernels/make-titles.en.md",
                  *(repo / "notebooks").glob("*-make-titles.ipynb")]:
            p.unlink(missing_ok=True)


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on PATH")
def test_make_help_documents_the_variables():
    r = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True)
    line = next(ln for ln in r.stdout.splitlines() if "new-question" in ln)
    assert all(v in line for v in ("SECTION=", "SLUG=", "TITLE=", "TITLE_EN=", "LAB=1")), line
