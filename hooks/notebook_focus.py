"""Let keyboard users scroll a notebook's code cells (on_page_content).

A code cell wider than the page scrolls sideways, and a scrolling box that cannot take focus cannot
be scrolled without a mouse (axe-core's scrollable-region-focusable, tests/test_a11y.py). Material
makes its own code blocks focusable; mkdocs-jupyter's cells (div.highlight-ipynb) get tabindex="0"
here, and so do the <pre> of printed outputs, which scroll sideways instead of wrapping.
"""
import re

_CELL = re.compile(r'<div class="highlight-ipynb(?=[ "])(?![^>]*\stabindex=)')
_TEXT_OUT = re.compile(r'(<div class="jp-RenderedText jp-OutputArea-output[^"]*"[^>]*>\s*)<pre>')


def on_page_content(html, page, config, files):
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    html = _CELL.sub('<div tabindex="0" class="highlight-ipynb', html)
    return _TEXT_OUT.sub(r'\1<pre tabindex="0">', html)  # printed tables scroll sideways too
