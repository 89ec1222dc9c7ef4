"""Replace `<!-- lab-cards -->` on question pages with a card per lab, and `<!-- lab-index -->`
on the home pages with a card for every lab (on_page_markdown).

Each card links the lab page, opens it in Colab, lists its hardware needs and shows the metrics
of its newest GPU result with their provenance, all drawn from results/, never typed.
"""
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.lab_html import lab_card  # noqa: E402
from kb.labs import ROOT, LabError  # noqa: E402
from kb.results import newest_result  # noqa: E402
from tools.pages import LAB_MARKER, is_question  # noqa: E402

INDEX_MARKER = "<!-- lab-index -->"
NONE = {"zh": "!!! info \"实验\"\n    本题的配套实验尚未发布。",
        "en": "!!! info \"Lab\"\n    The lab for this question is not published yet."}


def on_page_markdown(markdown, page, config, files):
    if INDEX_MARKER in markdown:
        labs = sorted(f"notebooks/{p.name}" for p in (ROOT / "notebooks").glob("*.ipynb"))
        markdown = markdown.replace(INDEX_MARKER, LAB_MARKER)
    elif is_question(page.file.src_uri):
        labs = page.meta.get("labs") or []
    else:
        return markdown
    lang = config.theme["language"]
    try:
        cards = [lab_card(nb, newest_result(nb), lang, str(Path(page.file.src_uri).parent)) for nb in labs]
    except LabError as e:
        raise PluginError(f"{page.file.src_uri}: {e}") from e
    return markdown.replace(LAB_MARKER, "\n\n".join(cards) if cards else NONE[lang])
