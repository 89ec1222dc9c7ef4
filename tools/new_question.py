"""Scaffold a question page (and optionally its lab) that already passes every check.

    make new-question SECTION=kernels SLUG=my-question [LAB=1]

Writes docs/<section>/<slug>.md and .en.md from the page contract, adds the page to the nav in
mkdocs.yml, and with --lab writes notebooks/NN-<slug>.ipynb (shared first and last cells, a
parameters cell, a checked and timed example) and links it from the page.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kb.lab_cells import ENV_CELL, setup_cell  # noqa: E402
from tools.pages import LAB_MARKER, VOCAB  # noqa: E402

BODY = {
    "zh": ["一段话的简答。", "三分钟内要讲清楚的要点。", "机制、数字与出处。",
           "本题实验测量的内容。\n\n" + LAB_MARKER, "| 误区 | 纠正 |\n| --- | --- |\n| （待补充） | （附出处） |",
           '??? question "面试官接着会问什么？"\n    （待补充）', "1. （出处：标题、作者、链接）"],
    "en": ["A one-paragraph answer.", "What to say in three minutes.", "Mechanism, numbers and sources.",
           "What this question's lab measures.\n\n" + LAB_MARKER,
           "| Mistake | Correction |\n| --- | --- |\n| (to do) | (with a citation) |",
           '??? question "What does the interviewer ask next?"\n    (to do)', "1. (source: title, author, link)"],
}

PARAMS = '''LAB_MODE = os.environ.get("LAB_MODE", "full" if DEVICE == "cuda" else "smoke")
N = {"smoke": 1 << 16, "full": 1 << 26}[LAB_MODE]'''

EXAMPLE = '''from snippets.common import record
from snippets.common.timing import bench_ms

x = torch.randn(N, device=DEVICE)
ref = x.double() * 2
out = torch.full_like(x, float("nan"))  # poisoned: every element must be written
torch.mul(x, 2, out=out)
torch.testing.assert_close(out.double(), ref)
ms = bench_ms(lambda: torch.mul(x, 2, out=out), DEVICE)
record.metric("example_gbps", 2 * x.numel() * x.element_size() / ms / 1e6, "GB/s",
              zh="示例：逐元素乘法带宽", en="Example: element-wise multiply bandwidth")'''


def page(lang: str, title: str, tags: list[str], difficulty: str, labs: list[str]) -> str:
    heads = [pair[0 if lang == "zh" else 1] for pair in VOCAB["sections"]]
    lab_list = "[" + ", ".join(labs) + "]"
    front = f"---\ntitle: {title}\ntags: [{', '.join(tags)}]\ndifficulty: {difficulty}\nlabs: {lab_list}\n---\n"
    return front + "".join(f"\n## {h}\n\n{b}\n" for h, b in zip(heads, BODY[lang]))


def notebook(title: str, title_en: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata.update(
        kernelspec={"name": "python3", "display_name": "Python 3", "language": "python"},
        kb={"title_en": title_en, "requires": {"gpus": 1, "capability": None},
            "smoke_budget_s": 60, "published": False})
    params = nbformat.v4.new_code_cell(PARAMS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}\n\n（实验说明）\n\n*(What this lab shows.)*"),
                nbformat.v4.new_code_cell(setup_cell()), params, nbformat.v4.new_code_cell(EXAMPLE),
                nbformat.v4.new_code_cell(ENV_CELL)]
    return nb


def add_to_nav(entry: str, section_title: str) -> None:
    path = ROOT / "mkdocs.yml"
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index("nav:")
    head = next((i for i in range(start, len(lines)) if lines[i].strip() == f"- {section_title}:"), None)
    if head is None:
        raise SystemExit(f"mkdocs.yml: no nav section '{section_title}'")
    end = head + 1
    while end < len(lines) and lines[end].startswith("      - "):
        end += 1
    lines.insert(end, f"      - {entry}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--section", required=True, choices=sorted(VOCAB["topics"]))
    ap.add_argument("--slug", required=True)
    ap.add_argument("--title", default=None, help="the question in Chinese")
    ap.add_argument("--title-en", default=None)
    ap.add_argument("--tags", default=None, help="comma-separated Chinese tags from schemas/vocabulary.yml")
    ap.add_argument("--difficulty", default="进阶", choices=sorted(VOCAB["difficulty"]))
    ap.add_argument("--lab", action="store_true", help="also scaffold notebooks/NN-<slug>.ipynb")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", args.slug):
        raise SystemExit(f"slug {args.slug!r} must be kebab-case (it becomes the URL)")
    tags = args.tags.split(",") if args.tags else [next(iter(VOCAB["tags"]))]
    unknown = [t for t in tags if t not in VOCAB["tags"]]
    if unknown:
        raise SystemExit(f"tags {unknown} are not in schemas/vocabulary.yml")
    zh_path = ROOT / "docs" / args.section / f"{args.slug}.md"
    if zh_path.exists():
        raise SystemExit(f"{zh_path.relative_to(ROOT)} already exists")
    title = args.title or f"关于 {args.slug} 的问题？"
    title_en = args.title_en or f"A question about {args.slug}?"
    labs = []
    if args.lab:
        taken = [int(p.name[:2]) for p in (ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")]
        nb_path = ROOT / "notebooks" / f"{max(taken, default=-1) + 1:02d}-{args.slug}.ipynb"
        nbformat.write(notebook(title, title_en), nb_path)
        labs = [nb_path.relative_to(ROOT).as_posix()]
        add_to_nav(f"labs/{nb_path.name}", "实验")
        print(f"wrote {labs[0]}")
    zh_path.parent.mkdir(parents=True, exist_ok=True)
    zh_path.write_text(page("zh", title, tags, args.difficulty, labs), encoding="utf-8")
    zh_path.with_suffix(".en.md").write_text(
        page("en", title_en, [VOCAB["tags"][t] for t in tags], VOCAB["difficulty"][args.difficulty], labs),
        encoding="utf-8")
    add_to_nav(f"{args.section}/{args.slug}.md", VOCAB["topics"][args.section])
    print(f"wrote {zh_path.relative_to(ROOT)} and its .en.md twin, added to the nav in mkdocs.yml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
