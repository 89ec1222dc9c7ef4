"""Scaffold a question page (and optionally its lab) that already passes every check.

    make new-question SECTION=kernels SLUG=my-question [TITLE="…？" TITLE_EN="…?"] [LAB=1]

Writes docs/<section>/<slug>.md and .en.md from the page contract, adds the page to the nav in
mkdocs.yml, and with --lab writes notebooks/NN-<slug>.ipynb (shared first and last cells, a
parameters cell, a checked and timed example) and links it from the page.

The Makefile hands its variables over as KB_SECTION, KB_SLUG, KB_TITLE, KB_TITLE_EN and KB_LAB in
the environment (`--from-env`), never through a shell command line, so the program gets the bytes
that were typed. Front matter is written by a YAML emitter; a title must be one line without `<` or
`>` (it becomes HTML); nothing is written when either page or the lab already exists.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import unicodedata
from pathlib import Path

import jsonschema
import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kb.lab_cells import ENV_CELL, setup_cell  # noqa: E402
from kb.pages import SCHEMA, VOCAB  # noqa: E402
from kb.strings import t  # noqa: E402

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


def front_matter(meta: dict) -> str:
    """`---`-fenced YAML from an emitter: any title that check_title accepts reads back unchanged."""
    return "---\n" + yaml.safe_dump(meta, allow_unicode=True, sort_keys=False, default_flow_style=None,
                                     width=float("inf")) + "---\n"


def page(lang: str, title: str, tags: list[str], difficulty: str, labs: list[str]) -> str:
    heads = [pair[0 if lang == "zh" else 1] for pair in VOCAB["sections"]]
    front = front_matter({"title": title, "tags": list(tags), "difficulty": difficulty, "labs": list(labs)})
    return front + "".join(f"\n## {h}\n\n{b}\n" for h, b in zip(heads, t(lang, "scaffold")))


def check_title(title: str, option: str) -> str:
    """The title, stripped; SystemExit naming the option when it is not one line of text without < or >."""
    bad = sorted({c for c in title if unicodedata.category(c)[0] == "C" or unicodedata.category(c) in ("Zl", "Zp")})
    if bad:
        raise SystemExit(f"{option} {title!r} must be one line of text: it contains {', '.join(map(repr, bad))}")
    title = title.strip()
    if "<" in title or ">" in title:
        raise SystemExit(f"{option} {title!r} must not contain < or >: the title becomes HTML on the site")
    try:
        jsonschema.validate(title, SCHEMA["properties"]["title"])
    except jsonschema.ValidationError as e:
        raise SystemExit(f"{option} {title!r}: {e.message} (schemas/front_matter.schema.json)") from None
    return title


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


ENV = {"section": "KB_SECTION", "slug": "KB_SLUG", "title": "KB_TITLE", "title_en": "KB_TITLE_EN", "lab": "KB_LAB"}


def from_env(args: argparse.Namespace, ap: argparse.ArgumentParser) -> None:
    """Fill the options from the Makefile's KB_* variables (an empty one counts as not given)."""
    for name, var in ENV.items():
        value = os.environ.get(var, "")
        if name == "lab":
            args.lab = args.lab or value not in ("", "0")
        elif value and getattr(args, name) is None:
            setattr(args, name, value)
    if args.section not in VOCAB["topics"]:
        ap.error(f"SECTION={args.section or ''} must be one of {', '.join(sorted(VOCAB['topics']))}")
    if args.slug is None:
        ap.error("SLUG= is required (kebab-case, it becomes the URL)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from-env", action="store_true",
                    help="read KB_SECTION, KB_SLUG, KB_TITLE, KB_TITLE_EN and KB_LAB (what `make new-question` sets)")
    ap.add_argument("--section", choices=sorted(VOCAB["topics"]))
    ap.add_argument("--slug")
    ap.add_argument("--title", default=None, help="the question in Chinese")
    ap.add_argument("--title-en", default=None)
    ap.add_argument("--tags", default=None, help="comma-separated Chinese tags from schemas/vocabulary.yml")
    ap.add_argument("--difficulty", default="进阶", choices=sorted(VOCAB["difficulty"]))
    ap.add_argument("--lab", action="store_true", help="also scaffold notebooks/NN-<slug>.ipynb")
    args = ap.parse_args(argv)
    if args.from_env:
        from_env(args, ap)
    elif args.section is None or args.slug is None:
        ap.error("--section and --slug are required")
    if not re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", args.slug):
        raise SystemExit(f"slug {args.slug!r} must be kebab-case (it becomes the URL)")
    tags = args.tags.split(",") if args.tags else [next(iter(VOCAB["tags"]))]
    unknown = [t for t in tags if t not in VOCAB["tags"]]
    if unknown:
        raise SystemExit(f"tags {unknown} are not in schemas/vocabulary.yml")
    title = check_title(args.title or f"关于 {args.slug} 的问题？", "TITLE" if args.from_env else "--title")
    title_en = check_title(args.title_en or f"A question about {args.slug}?",
                           "TITLE_EN" if args.from_env else "--title-en")
    zh_path = ROOT / "docs" / args.section / f"{args.slug}.md"
    existing = [p for p in (zh_path, zh_path.with_suffix(".en.md")) if p.exists()]
    if args.lab:
        existing += sorted((ROOT / "notebooks").glob(f"[0-9][0-9]-{args.slug}.ipynb"))
    if existing:
        raise SystemExit(f"{', '.join(p.relative_to(ROOT).as_posix() for p in existing)} already exist(s): "
                         "nothing written (pick another SLUG, or edit the existing page)")
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
    add_to_nav(f"{args.section}/{args.slug}.md", t("zh", f"topics.{args.section}"))
    print(f"wrote {zh_path.relative_to(ROOT)} and its .en.md twin, added to the nav in mkdocs.yml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
