"""One shared stylesheet for the notebook pages instead of 0.6 MB of CSS in each (on_pre_build,
on_page_content, on_post_page, on_post_build).

mkdocs-jupyter (0.26, no option to turn it off) writes JupyterLab's stylesheets as <style> blocks
ahead of every rendered notebook, and after it a <style> holding a Python list's repr of the
Pygments CSS, which no browser can parse. on_page_content takes the blocks ahead of the notebook
out of the page (<style> in the notebook's own outputs stay) and drops the unparseable one;
on_post_page links the stylesheet, named by a hash of its content so a host can let browsers keep
it, at the end of <head>: after the theme's and kb.css, as the inline copies came after them;
on_post_build writes it to assets/stylesheets/.
"""
import hashlib
import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.utils import get_relative_url

_WRAPPER = '<div class="jupyter-wrapper">'
_END = "<!-- jupyter-wrapper -->"
_STYLE = re.compile(r"<style[^>]*>(.*?)</style>\s*", re.S)
_sheets: dict[str, str] = {}  # site path -> CSS


def on_pre_build(config):
    _sheets.clear()  # `mkdocs serve` rebuilds in one process


def _is_notebook(page) -> bool:
    return page.file.src_uri.endswith(".ipynb")


def on_page_content(html, page, config, files):
    if not _is_notebook(page):
        return html
    start, end = html.find(_WRAPPER), html.rfind(_END)
    if start < 0 or end < 0:
        raise PluginError(f"{page.file.src_uri}: mkdocs-jupyter's output has no jupyter-wrapper, "
                          "so hooks/notebook_css.py cannot tell its stylesheets from the notebook's")
    head, body, tail = html[:start], html[start:end], html[end:]
    css = "\n".join(m.group(1).strip() for m in _STYLE.finditer(head))
    if not css:
        raise PluginError(f"{page.file.src_uri}: mkdocs-jupyter wrote no stylesheet ahead of the notebook")
    for m in _STYLE.finditer(tail):
        if not m.group(1).lstrip().startswith("['"):
            css += "\n" + m.group(1).strip()  # a real stylesheet, should a later mkdocs-jupyter fix its footer
    path = f"assets/stylesheets/jupyter.{hashlib.sha256(css.encode()).hexdigest()[:8]}.css"
    _sheets[path] = css
    page.kb_notebook_css = path
    return _STYLE.sub("", head) + body + _STYLE.sub("", tail)


def on_post_page(output, page, config):
    path = getattr(page, "kb_notebook_css", None)
    if path is None:
        return output
    link = f'<link rel="stylesheet" href="{get_relative_url(path, page.url)}">\n'
    return output.replace("</head>", link + "</head>", 1)


def on_post_build(config):
    for path, css in _sheets.items():
        out = Path(config.site_dir) / path
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(css, encoding="utf-8")
