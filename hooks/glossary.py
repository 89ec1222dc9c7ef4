"""Glossary tooltips from schemas/glossary.yml (on_page_content).

The first use of each term on every page but the glossary's is wrapped in <abbr title=...>, which
Material shows as a tooltip (content.tooltips). Code, links, headings and existing abbreviations are
left alone. The glossary table itself is a shortcode (hooks/shortcodes.py).

The content is HTML, so a term is looked for as HTML text (`&` as `&amp;`) and never inside a
character reference; the title comes escaped from kb.glossary.tooltip.
"""
import html
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.glossary import terms, tooltip  # noqa: E402

SKIP = {"code", "pre", "a", "abbr", "h1", "h2", "h3", "h4", "h5", "h6", "script", "style", "svg", "button"}
_TAG = re.compile(r"(<[^>]+>)")
_ENTITY = re.compile(r"&(?:#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);")


def _pattern(term: str) -> re.Pattern:
    term = html.escape(term, quote=False)
    if term.isascii():
        return re.compile(rf"(?<![\w-]){re.escape(term)}(?![\w-])")
    return re.compile(re.escape(term))


def _entries(lang: str):
    for term in terms():
        names = [term[lang], *term.get("aliases", [])] + ([term["en"]] if lang == "zh" else [])
        yield [_pattern(n) for n in names], tooltip(term, lang)


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
    taken = [(m.start(), m.end()) for m in _ENTITY.finditer(text)]
    for entry in list(pending):
        patterns, title = entry
        for pat in patterns:
            hit = next((m for m in pat.finditer(text)
                        if all(m.end() <= a or m.start() >= b for a, b, _ in spans)
                        and all(m.end() <= a or m.start() >= b or a >= m.start() and b <= m.end()
                                for a, b in taken)), None)
            if hit:
                spans.append((hit.start(), hit.end(), title))
                pending.remove(entry)
                break
    for start, end, title in sorted(spans, reverse=True):
        text = f'{text[:start]}<abbr title="{title}">{text[start:end]}</abbr>{text[end:]}'
    return text
