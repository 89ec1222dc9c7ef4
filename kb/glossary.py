"""The glossary (schemas/glossary.yml): its table and its tooltip titles, in each language."""
from __future__ import annotations

import functools
import html

import yaml

from kb.labs import ROOT
from kb.strings import t


@functools.cache
def terms() -> list[dict]:
    return yaml.safe_load((ROOT / "schemas/glossary.yml").read_text(encoding="utf-8"))


def table(lang: str) -> str:
    other = "en" if lang == "zh" else "zh"
    rows = [f"| {term[lang]} | {term[other]} | {term[lang + '_def']} |" for term in terms()]
    head = "| " + " | ".join(t(lang, "glossary_head")) + " |"
    return "\n".join([head, "| --- | --- | --- |", *rows])


def tooltip(term: dict, lang: str) -> str:
    return html.escape(f"{term['zh']} / {term['en']}: {term[lang + '_def']}", quote=True)
