"""Navigation titles of the English site from the string catalogues (on_config).

mkdocs-static-i18n translates nav titles with each language's `nav_translations`; they are filled
here from kb/strings/{zh,en}.yml so that the words live in one catalogue per language, not in
mkdocs.yml as well.
"""
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.strings import nav_translations  # noqa: E402


def on_config(config):
    i18n = config.plugins.get("i18n")
    if i18n is None:
        raise PluginError("hooks/i18n_nav.py: the i18n plugin is not configured in mkdocs.yml")
    for language in i18n.config.languages:
        if not language.default:
            language.nav_translations = nav_translations()
    return config
