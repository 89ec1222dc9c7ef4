"""Figure descriptions come from the code that draws them (kb/lab_html.figure_descriptions): the cell's own
titles and axis labels, and those of the snippet functions it calls that draw, read from their source."""
import json
from pathlib import Path

import nbformat

from kb.lab_html import figure_descriptions

ROOT = Path(__file__).resolve().parents[1]


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return json.loads(nbformat.writes(nb))


def _image_cell(source):
    cell = nbformat.v4.new_code_cell(source)
    cell.outputs = [nbformat.v4.new_output("display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"})]
    return cell


def test_axis_labels_and_docstring_of_the_snippet_that_draws():
    nb = _nb(nbformat.v4.new_markdown_cell("## 带宽 / Bandwidth"),
             _image_cell("from snippets.ceilings.bandwidth import plot_copy_sweep\n"
                         "from snippets.common import record\nrecord.table('t', ['a'], [[1]])\nplot_copy_sweep(rows, 1)"))
    [en] = figure_descriptions(nb, "en")
    assert en.startswith("Figure 1: Bandwidth — ") and "x: buffer size" in en and "y: GB/s" in en
    assert "Record a table" not in en, "a helper that draws nothing describes nothing"
    [zh] = figure_descriptions(nb, "zh")
    assert zh.startswith("图 1: 带宽")


def test_a_literal_title_at_the_call_wins_over_the_function_docstring():
    nb = _nb(_image_cell("from snippets.fusion.plots import plot_bandwidth\n"
                         "plot_bandwidth(rows, 3000.0, title='forward at p = 0')"))
    [en] = figure_descriptions(nb, "en")
    assert "forward at p = 0" in en and "rows:" not in en and "x: hidden size N" in en


def test_module_attribute_calls_are_followed():
    nb = _nb(_image_cell("from snippets.gemm import schedule\nschedule.plot_timelines({})"))
    [en] = figure_descriptions(nb, "en")
    assert "x: time" in en


def test_every_recorded_figure_gets_more_than_its_heading():
    for path in sorted((ROOT / "results").glob("*/*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for text in figure_descriptions(nb, "en"):
            assert "(" in text or " — " in text, f"{path.name}: {text}"
