"""Put a question's way into practice under its title (on_page_markdown): its labs (the site's lab page
and Colab), its difficulty, its tags and its origin.

Material's own tag list above the title is hidden on question pages (meta `hide: [tags]`): the header
shows the same tags, linked to the same anchors of the tags page.
"""
import html
import sys
from pathlib import Path

from mkdocs.utils import get_relative_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.labs import ROOT, colab_url, lab_meta, read_notebook, title_zh  # noqa: E402
from kb.pages import is_question, lang_of  # noqa: E402
from kb.render import lab_link, md_text  # noqa: E402
from kb.strings import t  # noqa: E402


def _tag_href(tag: str, page, config) -> str:
    plugins = getattr(config, "plugins", None)
    tags = plugins.get("material/tags") if plugins is not None else None
    conf = tags.config if tags is not None else None
    anchor = (conf.tags_slugify_format.format(slug=conf.tags_slugify(tag, conf.tags_slugify_separator))
              if conf is not None else "")
    prefix = "en/" if lang_of(page.file.src_uri) == "en" else ""
    return get_relative_url(f"{prefix}tags/", getattr(page, "url", "") or page.file.src_uri) + (f"#{anchor}" if anchor else "")


def _lab_line(notebook: str, lang: str, page_dir: str) -> str:
    nb = read_notebook(ROOT / notebook)
    title = title_zh(nb) if lang == "zh" else lab_meta(ROOT / notebook, nb).title_en
    return (f'<li markdown>[{md_text(title)}]({lab_link(notebook, page_dir)}) '
            f'<a class="kb-badge kb-colab" href="{html.escape(colab_url(notebook))}" target="_blank" '
            f'rel="noopener">{t(lang, "colab")}</a></li>')


def on_page_markdown(markdown, page, config, files):
    if not is_question(page.file.src_uri):
        return markdown
    lang = lang_of(page.file.src_uri)
    page.meta["hide"] = [*page.meta.get("hide", []), "tags"]
    level = html.escape(page.meta["difficulty"])
    line = (f'<p class="kb-meta"><span class="kb-badge kb-difficulty" data-difficulty="{level}">'
            f'{t(lang, "difficulty")}: {level}</span>')
    if page.meta.get("source"):
        line += (f' <span class="kb-badge" title="{html.escape(page.meta["source"], quote=True)}">'
                 f'{t(lang, "source_bank")}</span>')
    line += "".join(f' <a class="kb-tag" href="{html.escape(_tag_href(tag, page, config), quote=True)}">'
                    f'{html.escape(tag)}</a>' for tag in page.meta.get("tags", []))
    line += "</p>"
    labs = page.meta.get("labs") or []
    if labs:
        page_dir = str(Path(page.file.src_uri).parent)
        items = "\n".join(_lab_line(nb, lang, page_dir) for nb in labs)
        line += (f'\n\n<div class="kb-practice" markdown>\n<span class="kb-practice__label">{t(lang, "practice")}</span>\n'
                 f'<ul class="kb-practice__labs" markdown>\n{items}\n</ul>\n</div>')
    return line + "\n\n" + markdown
