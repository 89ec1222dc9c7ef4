"""Fail the build on a question page that breaks the page contract (on_page_markdown).

The contract (front matter schema, vocabulary, section order, lab marker, no typed-in code) lives
in kb/pages.py so that the tests check the same rules on broken fixtures.
"""
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.pages import PageError, check_page, is_question  # noqa: E402


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri.endswith(".md") and is_question(page.file.src_uri):
        try:
            check_page(Path(page.file.abs_src_path), Path(config.docs_dir))
        except PageError as e:
            raise PluginError(str(e)) from e
    return markdown
