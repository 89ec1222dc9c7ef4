"""Expand the in-page shortcodes (on_page_markdown), all of one grammar (kb/markers.py).

`<!-- metric LAB NAME [%] [gpu=SLUG] -->` becomes the recorded value, `<!-- lab-cards -->` a card
per lab of the page followed by where its quoted numbers come from, `<!-- lab-index -->` a card for
every lab, `<!-- glossary -->` the glossary table, `<!-- freshness -->` the state of every lab's result. Every value comes from a verified result under
results/; a missing lab, result or metric fails the build, naming the page.
"""
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb import glossary, markers, render  # noqa: E402
from kb.labs import LabError  # noqa: E402
from kb.pages import is_question  # noqa: E402
from kb.strings import t  # noqa: E402


def on_page_markdown(markdown, page, config, files):
    lang = config.theme["language"]
    page_dir = str(Path(page.file.src_uri).parent)
    where = f"docs/{page.file.src_uri}"
    gpu = page.meta.get("gpu")
    try:
        found = markers.find(markdown, where)
        labs = page.meta.get("labs") or [] if is_question(page.file.src_uri) else []

        def cards(_m):
            if not labs:
                return f'!!! info "{t(lang, "no_lab_title")}"\n    {t(lang, "no_lab")}'
            body = "\n\n".join(render.lab_card(nb, lang, page_dir) for nb in labs)
            return body + "\n\n" + render.sources(found, lang, gpu)

        def index(_m):
            every = sorted(f"notebooks/{p.name}" for p in (render.ROOT / "notebooks").glob("*.ipynb"))
            return "\n\n".join(render.lab_card(nb, lang, page_dir) for nb in every)

        return markers.replace(markdown, where, {
            "metric": lambda m: render.quote(m, lang, page_dir, gpu),
            "lab-cards": cards, "lab-index": index,
            "glossary": lambda _m: glossary.table(lang),
            "freshness": lambda _m: render.freshness_table(lang, page_dir),
        })
    except (ValueError, LabError) as e:
        raise PluginError(f"{where}: {e}") from e
