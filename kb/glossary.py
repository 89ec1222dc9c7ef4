"""The glossary (schemas/glossary.yml): its table and its tooltip titles, in each language.

Entries are data: the table writes them with kb.render.md_text (no markup, no column breaks) and the
tooltips escape them for an HTML attribute.
"""
from __future__ import annotations

import functools
import html
from pathlib import Path

import yaml

from kb.labs import ROOT
from kb.render import md_text
from kb.strings import t

GLOSSARY = ROOT / "schemas/glossary.yml"  # tests point this at a copy under tmp_path


@functools.cache
def _load(path: Path) -> list[dict]:
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def terms() -> list[dict]:
    return _load(GLOSSARY)


def table(lang: str) -> str:
    other = "en" if lang == "zh" else "zh"
    rows = [f"| {md_text(term[lang])} | {md_text(term[other])} | {md_text(term[lang + '_def'])} |" for term in terms()]
    head = "| " + " | ".join(t(lang, "glossary_head")) + " |"
    return "\n".join([head, "| --- | --- | --- |", *rows])


def tooltip(term: dict, lang: str) -> str:
    """The title attribute's value, escaped for HTML (hooks/glossary.py puts it into <abbr title="...">)."""
    return html.escape(" ".join(f"{term['zh']} / {term['en']}: {term[lang + '_def']}".split()), quote=True)
