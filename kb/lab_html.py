"""A rendered lab page's HTML, mended: its English title, heading ids that its links reach, figure descriptions.

mkdocs-jupyter renders a notebook with nbconvert, which gives a heading with no ASCII letters an empty id
(`<h1 id="">`), while the page's table of contents (and Material's skip link) comes from Python-Markdown's
toc, which calls it `_1`; and every plot carries nbconvert's alt text "No description has been provided
for this image". These functions take the HTML and the notebook and return the HTML mended; the hook
hooks/lab_pages.py applies them.
"""
from __future__ import annotations

import ast
import html as html_lib
import re
from pathlib import Path

from kb.strings import t

DEFAULT_ALT = "No description has been provided for this image"
_HEADING = re.compile(r'<h([1-6]) id="([^"]*)">(.*?)<a class="anchor-link" href="#[^"]*">¶</a></h\1>', re.S)
_CJK = "\u3000-\u303f\u3400-\u9fff\uff00-\uffef"
_BILINGUAL = re.compile(rf"^(.*[{_CJK}].*?)\s*/\s+([^{_CJK}]+)$")
_TITLE_CALL = re.compile(r"""\b(?:set_title|suptitle|title)\(\s*(f?)(["'])(.+?)(?<!\\)\2""")
_TITLE_ARG = re.compile(r"""\btitle\s*=\s*(f?)(["'])(.+?)(?<!\\)\2""")
_DRAWS = re.compile(r"\b(?:plt\.|subplots\(|\.plot\(|\.barh?\(|\.imshow\(|\.scatter\(|\.loglog\(|set_title\()")
_LABEL_CALL = re.compile(r"""\bset_([xy])label\(\s*(f?)(["'])(.+?)(?<!\\)\3""")


def slug(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))


def _plain(fragment: str) -> str:
    return " ".join(html_lib.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


def retitle(html: str, title: str) -> str:
    """The notebook's first H1 shows `title` instead (the English page of a lab written in Chinese)."""
    return _HEADING.sub(lambda m: f'<h1 id="{m.group(2)}">{html_lib.escape(title)}<a class="anchor-link" '
                                  f'href="#{m.group(2)}">¶</a></h1>' if m.group(1) == "1" else m.group(0),
                        html, count=1)


def _anchors(toc) -> list:
    out = []
    for item in toc or []:
        out.append(item)
        out += _anchors(getattr(item, "children", []))
    return out


def fix_heading_ids(html: str, toc, h1_title: str) -> str:
    """Every notebook heading gets a non-empty id, and the table of contents (which Material's skip link
    and sidebar use) points at exactly that id. A heading whose text has no ASCII letters gets
    `section-N`; the H1 the slug of `h1_title` (the lab's English title, the same in both languages)."""
    anchors = _anchors(toc)
    headings = list(_HEADING.finditer(html))
    if len(anchors) != len(headings):  # pair by title when mkdocs-jupyter's toc saw other headings
        by_title: dict[str, list] = {}
        for a in anchors:
            by_title.setdefault(_plain(a.title), []).append(a)
        pairs = [(h, (by_title.get(_plain(h.group(3))) or [None]).pop(0)) for h in headings]
    else:
        pairs = list(zip(headings, anchors))
    used = {a.id for a in anchors if a.id and not re.fullmatch(r"_\d+", a.id)}
    out, last = [], 0
    for n, (h, anchor) in enumerate(pairs, 1):
        level, old, inner = h.group(1), h.group(2), h.group(3)
        want = anchor.id if anchor is not None and anchor.id and not re.fullmatch(r"_\d+", anchor.id) else old
        if not want or re.fullmatch(r"_\d+", want):
            want = (slug(h1_title) if level == "1" else "") or f"section-{n}"
            while want in used:
                want += "-1"
            used.add(want)
        if anchor is not None:
            anchor.id = want
        out.append(html[last:h.start()])
        out.append(f'<h{level} id="{want}">{inner}<a class="anchor-link" href="#{want}">¶</a></h{level}>')
        last = h.end()
    out.append(html[last:])
    return "".join(out)


def pick_language(heading: str, lang: str) -> str:
    """'中文 / English' headings: the half in the page's language."""
    m = _BILINGUAL.match(heading)
    return heading if not m else m.group(1 if lang == "zh" else 2).strip()


def _literal(fstring: str, text: str) -> str | None:
    if fstring and "{" in text:
        return None  # an f-string's text is known only when the code runs
    text = " ".join(text.replace("\\n", " ").split())
    return text if text.strip("… ") else None


def _titles(source: str) -> list[str]:
    found = [_literal(m.group(1), m.group(3)) for m in _TITLE_CALL.finditer(source)]
    return [t for t in found if t]


def _axes(source: str) -> str:
    labels = {}
    for m in _LABEL_CALL.finditer(source):
        text = _literal(m.group(2), m.group(4))
        if text:
            labels.setdefault(m.group(1), text)
    return ", ".join(f"{axis}: {labels[axis]}" for axis in "xy" if axis in labels)


def _imported_functions(nb: dict) -> dict[str, tuple[str, str]]:
    """Names the notebook binds to functions of its snippets: {'plot_bandwidth': (file, name),
    'schedule.plot_timelines': (file, name)}, for reading the code that draws each figure."""
    from kb.labs import ROOT, module_file

    names = {}
    for cell in nb["cells"]:
        if cell.get("cell_type") != "code":
            continue
        source = "\n".join(ln for ln in "".join(cell.get("source", "")).splitlines() if not ln.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("snippets")):
                continue
            for alias in node.names:
                as_module = module_file(f"{node.module}.{alias.name}")
                if as_module:
                    names[f"{alias.asname or alias.name}."] = (str(ROOT / as_module), "")
                elif module_file(node.module):
                    names[alias.asname or alias.name] = (str(ROOT / module_file(node.module)), alias.name)
    return names


def _first_sentence(doc: str) -> str:
    text = " ".join(doc.split("\n\n")[0].split())
    return re.split(r"(?<=\.)\s", text, maxsplit=1)[0].rstrip(".")


def _drawn_by(source: str, functions: dict[str, tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(descriptions, axis labels) of the snippet functions this cell calls that draw: a literal title= at
    the call, else the titles the function sets, else its docstring's first sentence; read from their code."""
    texts, axes = [], []
    for m in re.finditer(r"\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)\s*\(", source):
        module, _, attr = m.group(1).rpartition(".")
        file, name = functions.get(m.group(1), ("", ""))
        if module and not file:
            file, name = functions.get(f"{module}.", ("", ""))[0], attr
        if not file or not name:
            continue
        code = Path(file).read_text(encoding="utf-8")
        fn = next((n for n in ast.parse(code).body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        body = ast.get_source_segment(code, fn) or "" if fn else ""
        if not _DRAWS.search(body):
            continue  # a helper the cell calls, not the code that draws
        title = next((t for t in (_literal(a.group(1), a.group(3)) for a in _TITLE_ARG.finditer(source[m.start():m.start() + 400])) if t), None)
        found = [title] if title else _titles(body) or ([_first_sentence(ast.get_docstring(fn))] if ast.get_docstring(fn) else [])
        texts += [t for t in found if t and t not in texts]
        if _axes(body):
            axes.append(_axes(body))
    return texts, axes


def _first_comment(source: str) -> str:
    for line in source.splitlines():
        s = line.strip()
        if s.startswith("#") and not s.startswith(("#!", "# %%")):
            return s.lstrip("# ").strip()
    return ""


def figure_descriptions(nb: dict, lang: str) -> list[str]:
    """One description per image output of the notebook, in order: its section heading, then what the code
    that draws it says: the titles and axis labels the cell sets, and those of the snippet functions it calls
    (their set_title, a literal title= at the call, or their docstring's first line); failing all that, the
    cell's first comment."""
    heading, out = "", []
    functions = _imported_functions(nb)
    for cell in nb["cells"]:
        source = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            for line in source.splitlines():
                if re.match(r"#{1,6} ", line):
                    heading = pick_language(re.sub(r"[*`_]", "", line.lstrip("#").strip()), lang)
            continue
        images = [o for o in cell.get("outputs", []) if any(k.startswith("image/") for k in o.get("data", {}))]
        drawn, axes = _drawn_by(source, functions) if images else ([], [])
        detail = "; ".join(_titles(source) + drawn) or _first_comment(source)
        axes = [a for a in [_axes(source)] + axes if a]
        for i, _ in enumerate(images, 1):
            text = " — ".join(p for p in (heading, detail) if p) + (f" ({axes[0]})" if axes else "")
            part = f" ({i}/{len(images)})" if len(images) > 1 else ""
            out.append(f"{t(lang, 'figure')} {len(out) + 1}: " + text + part)
    return out


def describe_figures(html: str, nb: dict, lang: str, page_title: str) -> str:
    """Each image with nbconvert's default alt text gets its description instead."""
    descriptions = iter(figure_descriptions(nb, lang))
    count = iter(range(1, 10_000))

    def alt(_m):
        n = next(count)
        text = next(descriptions, None) or f"{t(lang, 'figure')} {n}: {page_title}"
        return f'alt="{html_lib.escape(text, quote=True)}"'

    return re.sub(rf'alt="{DEFAULT_ALT}"', alt, html)
