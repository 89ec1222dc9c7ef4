"""Make MkDocs treat *.ipynb as documentation pages (no event: patched at import).

mkdocs-static-i18n rebuilds every File in its on_files and drops mkdocs-jupyter's NotebookFile
wrapper, so notebooks would ship as raw JSON pages while --strict still passes
(ultrabug/mkdocs-static-i18n#198). Declaring .ipynb a documentation page lets i18n localise it
like Markdown and lets mkdocs-jupyter render it in on_pre_page.
"""
from mkdocs.structure.files import File

_is_doc = File.is_documentation_page


def _is_doc_or_notebook(self: File) -> bool:
    return _is_doc(self) or self.src_uri.endswith(".ipynb")


File.is_documentation_page = _is_doc_or_notebook
