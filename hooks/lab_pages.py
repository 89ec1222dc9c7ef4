"""Render each lab page from its newest GPU result, under a header (on_pre_page, on_page_content).

on_pre_page runs before mkdocs-jupyter's (priority 50 > 0) and points the page at
results/<gpu>/<stem>.ipynb when one exists; on_page_content puts the Colab link, the hardware
needs and the provenance banner (GPU, versions, date, fresh or stale) above the notebook.
"""
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.lab_html import lab_header  # noqa: E402
from kb.labs import LabError  # noqa: E402
from kb.results import newest_result  # noqa: E402


def _notebook(page) -> str | None:
    uri = page.file.src_uri
    return f"notebooks/{Path(uri).name}" if uri.startswith("labs/") and uri.endswith(".ipynb") else None


@event_priority(50)
def on_pre_page(page, config, files):
    nb = _notebook(page)
    if nb:
        try:
            result = newest_result(nb)
        except LabError as e:
            raise PluginError(str(e)) from e
        page.kb_result = result
        if result:
            page.file.abs_src_path = str(result.notebook_path)
    return page


def on_page_content(html, page, config, files):
    nb = _notebook(page)
    if not nb:
        return html
    try:
        header = lab_header(nb, getattr(page, "kb_result", None), config.theme["language"])
    except LabError as e:
        raise PluginError(str(e)) from e
    return header + html
