"""Old URLs keep working in every language (on_post_build).

mkdocs-redirects writes its redirect pages for the default language only; each points to its new page
with a relative link. The same page copied under /<lang>/ therefore leads to that language's new page.
"""
import shutil
from pathlib import Path


def on_post_build(config):
    redirects, i18n = config.plugins.get("redirects"), config.plugins.get("i18n")
    if redirects is None or i18n is None:
        return
    site = Path(config.site_dir)
    for old in redirects.config["redirect_maps"]:
        page = Path(old).with_suffix("") / "index.html"
        if not (site / page).is_file():
            continue  # not this build's redirect (an alternate language's build)
        for language in i18n.config.languages:
            if not language.default:
                (site / language.locale / page).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(site / page, site / language.locale / page)
