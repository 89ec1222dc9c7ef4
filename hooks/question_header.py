"""Show a question's difficulty and origin under its title (on_page_markdown)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.pages import is_question, lang_of  # noqa: E402

LABELS = {"zh": ("难度", "题目来源：面经题库"), "en": ("Difficulty", "Source: interview question bank")}


def on_page_markdown(markdown, page, config, files):
    if not is_question(page.file.src_uri):
        return markdown
    word, source = LABELS[lang_of(page.file.src_uri)]
    level = page.meta["difficulty"]
    line = f'<p class="kb-meta"><span class="kb-badge kb-difficulty">{word}: {level}</span>'
    if page.meta.get("source"):
        line += f' <span class="kb-badge" title="{page.meta["source"]}">{source}</span>'
    return line + "</p>\n\n" + markdown
