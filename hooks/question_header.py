"""Show a question's difficulty and origin under its title (on_page_markdown)."""
import html
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.pages import is_question, lang_of  # noqa: E402
from kb.strings import t  # noqa: E402


def on_page_markdown(markdown, page, config, files):
    if not is_question(page.file.src_uri):
        return markdown
    lang = lang_of(page.file.src_uri)
    level = html.escape(page.meta["difficulty"])
    line = f'<p class="kb-meta"><span class="kb-badge kb-difficulty">{t(lang, "difficulty")}: {level}</span>'
    if page.meta.get("source"):
        line += (f' <span class="kb-badge" title="{html.escape(page.meta["source"], quote=True)}">'
                 f'{t(lang, "source_bank")}</span>')
    return line + "</p>\n\n" + markdown
