"""Glossary tooltips and glossary pages from schemas/glossary.yml.

on_page_markdown fills `<!-- glossary -->` on the glossary pages with the full table;
on_page_content wraps the first use of each term on every other page in <abbr title=...>,
which Material shows as a tooltip (content.tooltips). Code, links, headings and existing
abbreviations are left alone.
"""
import html
import re
from pathlib import Path

import yaml

TERMS = yaml.safe_load((Path(__file__).resolve().parents[1] / "schemas/glossary.yml").read_text("utf-8"))
MARKER = "<!-- glossary -->"
SKIP = {"code", "pre", "a", "abbr", "h1", "h2", "h3", "h4", "h5", "h6", "script", "style", "svg", "button"}
_TAG = re.compile(r"(<[^>]+>)")


def _pattern(term: str) -> re.Pattern:
    if term.isascii():
        return re.compile(rf"(?<![\w-]){re.escape(term)}(?![\w-])")
    return re.compile(re.escape(term))


def _entries(lang: str):
    for t in TERMS:
        names = [t[lang], *t.get("aliases", [])] + ([t["en"]] if lang == "zh" else [])
        title = f"{t['zh']} / {t['en']}: {t[lang + '_def']}"
        yield [_pattern(n) for n in names], html.escape(title, quote=True)


def on_page_markdown(markdown, page, config, files):
    if MARKER not in markdown:
        return markdown
    lang = config.theme["language"]
    head = "| 中文 | English | 释义 |\n| --- | --- | --- |" if lang == "zh" else \
        "| English | 中文 | Meaning |\n| --- | --- | --- |"
    rows = [f"| {t['zh']} | {t['en']} | {t['zh_def']} |" if lang == "zh" else
            f"| {t['en']} | {t['zh']} | {t['en_def']} |" for t in TERMS]
    return markdown.replace(MARKER, "\n".join([head, *rows]))


def on_page_content(content, page, config, files):
    if page.file.src_uri.startswith("glossary"):
        return content
    pending = list(_entries(config.theme["language"]))
    out, stack = [], []
    for piece in _TAG.split(content):
        if piece.startswith("<"):
            m = re.match(r"<(/?)([a-zA-Z0-9]+)", piece)
            if m and m.group(2).lower() in SKIP and not piece.endswith("/>"):
                if m.group(1):
                    if stack:
                        stack.pop()
                else:
                    stack.append(m.group(2).lower())
            out.append(piece)
            continue
        if not stack and piece.strip():
            piece = _wrap(piece, pending)
        out.append(piece)
    return "".join(out)


def _wrap(text: str, pending: list) -> str:
    """Wrap the first hit of each pending term in `text`; hits never overlap."""
    spans = []
    for entry in list(pending):
        patterns, title = entry
        for pat in patterns:
            hit = next((m for m in pat.finditer(text)
                        if all(m.end() <= a or m.start() >= b for a, b, _ in spans)), None)
            if hit:
                spans.append((hit.start(), hit.end(), title))
                pending.remove(entry)
                break
    for start, end, title in sorted(spans, reverse=True):
        text = f'{text[:start]}<abbr title="{title}">{text[start:end]}</abbr>{text[end:]}'
    return text
