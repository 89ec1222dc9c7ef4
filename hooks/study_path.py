"""Write the study path into the page that asks for it (on_page_markdown).

The shortcode `<!-- study-path -->` (kb/markers.py's grammar) in docs/study-path(.en).md becomes three tracks of questions in order, each with
its difficulty and tags, made from the question pages' front matter (kb/study.py), and a filter form
that docs/javascripts/kb.js turns on.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb import markers, study  # noqa: E402


def _nav_order(nav) -> list[str]:
    out = []
    for item in nav or []:
        if isinstance(item, dict):
            for value in item.values():
                out += _nav_order(value) if isinstance(value, list) else [value]
        elif isinstance(item, str):
            out.append(item)
    return out


def on_page_markdown(markdown, page, config, files):
    def render(_marker):
        return study.markdown(Path(config.docs_dir), config.theme["language"], _nav_order(config.nav))
    return markers.replace(markdown, f"docs/{page.file.src_uri}", {"study-path": render})
