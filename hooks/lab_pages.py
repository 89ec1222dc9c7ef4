"""Render each lab page from its verified GPU result, under a header (on_pre_page, on_page_content).

on_pre_page runs before mkdocs-jupyter's (priority 50 > 0) and points the page at
results/<gpu>/<stem>.ipynb when one exists; on_page_content (after mkdocs-jupyter has rendered the
notebook) puts the Colab link, the hardware needs and the provenance banner (GPU, versions, date,
commit, fresh or stale) above the notebook, titles the English page from metadata.kb.title_en, gives
every heading the id its table of contents links to, and describes each figure in its alt text.
"""
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.labs import LabError, lab_meta, read_notebook  # noqa: E402
from kb.lab_html import describe_figures, fix_heading_ids, retitle  # noqa: E402
from kb.render import lab_header  # noqa: E402
from kb.results import result_for  # noqa: E402


def _notebook(page) -> str | None:
    uri = page.file.src_uri
    return f"notebooks/{Path(uri).name}" if uri.startswith("labs/") and uri.endswith(".ipynb") else None


@event_priority(50)
def on_pre_page(page, config, files):
    nb = _notebook(page)
    if nb:
        try:
            result = result_for(nb)
        except LabError as e:
            raise PluginError(str(e)) from e
        page.kb_result = result
        if result:
            page.file.abs_src_path = str(result.notebook_path)
        if config.repo_url and page.edit_url:  # the page's source is the notebook, not docs/labs/
            page.edit_url = f"{config.repo_url.rstrip('/')}/edit/{config.edit_uri.split('/')[1]}/{nb}"
    return page


def on_page_content(html, page, config, files):
    nb = _notebook(page)
    if not nb:
        return html
    lang = config.theme["language"]
    try:
        header = lab_header(nb, getattr(page, "kb_result", None), lang)
        rendered = read_notebook(Path(page.file.abs_src_path))
        title = lab_meta(Path(page.file.abs_src_path), rendered).title_en if lang == "en" else None
    except LabError as e:
        raise PluginError(str(e)) from e
    if title:
        page.title = title  # <title>, navigation and search; the notebook's own H1 is Chinese
        html = retitle(html, title)
    html = fix_heading_ids(html, page.toc, title or page.title)
    return header + describe_figures(html, rendered, lang, page.title)
