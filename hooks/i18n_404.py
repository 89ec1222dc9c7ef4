"""The 404 page in each language: the default language's at the site root, each other language's under its
folder (on_post_template).

mkdocs-static-i18n renders the 404 template once per language into the same site/404.html, so the last
language built wins and the root 404 came out in English. Static hosts serve the root 404 for any missing
path (GitHub Pages) or the nearest one up the path (Netlify, Cloudflare Pages): the root keeps the default
language's page and /en/404.html holds the English one."""
from pathlib import Path

_default_404: dict[str, str] = {}  # site_dir -> the default language's rendered 404


def on_post_template(output, template_name, config):
    i18n = config.plugins.get("i18n")
    if template_name != "404.html" or i18n is None:
        return output
    lang = config.theme["language"]
    default = next(lg.locale for lg in i18n.config.languages if lg.default)
    if lang == default:
        _default_404[config.site_dir] = output
        return output
    out = Path(config.site_dir) / lang / "404.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(output, encoding="utf-8")
    return _default_404.get(config.site_dir, output)
