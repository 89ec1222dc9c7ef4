"""The language switch: each page's switch leads to its twin, the <head> alternates to the language
roots, where a sitemap exists (on_page_context, on_post_build).

Material fetches `sitemap.xml` under the URL of every <link rel="alternate"> (it expects language
roots there, and maps pages between languages with those sitemaps). mkdocs-static-i18n points those
links at the page's twin instead (/en/kernels/x/), so every page load asked for a sitemap that does not
exist, and the 404 page, rendered after all pages, kept the last page's twins. Here the twins move to
`page.kb_alternates`, which overrides/partials/alternate.html uses for the switch; config.extra.alternate
goes back to the language roots (the head links and the 404 page); and each language root gets the
sitemap of its pages. docs/javascripts/kb.js keeps the reader's place across the switch.
"""
import copy
import re
from pathlib import Path

from mkdocs.plugins import event_priority


def on_page_context(context, page, config, nav):  # after mkdocs-static-i18n's (priority 50)
    i18n = config.plugins.get("i18n")
    roots = getattr(i18n, "extra_alternate", None)
    if roots:
        # mkdocs-static-i18n sets the attribute (config.extra.alternate), which Jinja reads before the key
        page.kb_alternates = copy.deepcopy(getattr(config.extra, "alternate", None) or roots)
        config.extra.alternate = copy.deepcopy(roots)
        config.extra["alternate"] = copy.deepcopy(roots)
    return context


@event_priority(-200)  # after mkdocs-static-i18n's on_post_build (-100) has built the other languages
def on_post_build(config):
    i18n = config.plugins.get("i18n")
    site = Path(config.site_dir)
    root_map = site / "sitemap.xml"
    if i18n is None or not root_map.is_file():
        return
    text = root_map.read_text(encoding="utf-8")
    head, _, rest = text.partition("<url>")
    urls = re.findall(r"<url>.*?</url>", "<url>" + rest, re.S)
    for language in i18n.config.languages:
        if language.default or not (site / language.locale).is_dir():
            continue
        mine = [u for u in urls if re.search(rf"<loc>[^<]*/{language.locale}/[^<]*</loc>", u)]
        out = site / language.locale / "sitemap.xml"
        if not out.exists():
            out.write_text(head + "\n    ".join(mine) + "\n</urlset>\n", encoding="utf-8")
