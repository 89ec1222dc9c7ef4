"""Let keyboard users scroll a notebook's code cells (on_page_content).

A code cell wider than the page scrolls sideways, and a scrolling box that cannot take focus cannot
be scrolled without a mouse (axe-core's scrollable-region-focusable, tests/test_a11y.py). Material
makes its own code blocks focusable; mkdocs-jupyter's cells (div.highlight-ipynb) get tabindex="0"
here, as nbconvert already gives their text outputs.
"""
import re

_CELL = re.compile(r'<div class="highlight-ipynb(?=[ "])(?![^>]*\stabindex=)')


def on_page_content(html, page, config, files):
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    return _CELL.sub('<div tabindex="0" class="highlight-ipynb', html)
