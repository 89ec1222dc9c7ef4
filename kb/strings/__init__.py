"""Site strings: one catalogue per language (zh.yml, en.yml beside this file), read once.

`t(lang, key, **values)` formats a string; a missing key or placeholder is an error naming the
catalogue and the key, so a string added in one language only fails the tests, not the reader.
"""
from __future__ import annotations

import functools
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
LANGS = ("zh", "en")


class StringsError(KeyError):
    def __str__(self) -> str:
        return self.args[0]


@functools.cache
def catalogue(lang: str) -> dict:
    if lang not in LANGS:
        raise StringsError(f"no string catalogue for language {lang!r} (have {', '.join(LANGS)})")
    path = HERE / f"{lang}.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise StringsError(f"kb/strings/{lang}.yml: not a mapping of keys to strings")
    return data


def t(lang: str, key: str, **values):
    """The string `key` in `lang`, with `values` filled in (lists and mappings are returned as they are)."""
    node = catalogue(lang)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise StringsError(f"kb/strings/{lang}.yml: no key {key!r}")
        node = node[part]
    if not isinstance(node, str):
        return node
    try:
        return node.format(**values) if values or "{" in node else node
    except (KeyError, IndexError) as e:
        raise StringsError(f"kb/strings/{lang}.yml: {key!r} needs the value {e}") from None


def nav_translations() -> dict[str, str]:
    """zh navigation title -> en title, for mkdocs-static-i18n, from the two catalogues."""
    zh, en = catalogue("zh"), catalogue("en")
    pairs = {zh["nav"][k]: en["nav"][k] for k in zh["nav"]}
    pairs.update({zh["topics"][k]: en["topics"][k] for k in zh["topics"]})
    return pairs
