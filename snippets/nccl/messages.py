"""The NCCL tools' user-facing messages: one catalogue per language, `messages/<lang>.yml` next to this file.

    msg("zh", "doctor.label.job")                            -> "作业"
    msg("en", "nccl_info.channels", channels=24)             -> "24 channels"
    msgs("en", "doctor.advice.straggler", culprits="1", ...)  -> one string per paragraph

Keys are the YAML mapping path joined with dots; a value is a `str.format` template or a list of them.
Both catalogues have the same keys and placeholders (tests/test_nccl_messages.py). A missing catalogue,
key or placeholder value raises MessageError naming the catalogue file and the key.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

DIR = Path(__file__).parent / "messages"


class MessageError(LookupError):
    pass


def languages() -> list[str]:
    """The languages with a catalogue: ['en', 'zh']."""
    return sorted(p.stem for p in DIR.glob("*.yml"))


def catalogue_path(lang: str) -> Path:
    """'zh' and 'zh-CN' -> messages/zh.yml."""
    return DIR / f"{re.split(r'[-_]', lang, maxsplit=1)[0]}.yml"


@functools.cache
def catalogue(lang: str) -> dict[str, str | list[str]]:
    path = catalogue_path(lang)
    try:
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MessageError(f"{path}: no message catalogue for language {lang!r}") from None
    return _flatten(tree or {}, path)


def _flatten(tree: dict, path: Path, prefix: str = "") -> dict[str, str | list[str]]:
    out = {}
    for k, v in tree.items():
        if not isinstance(k, str):
            raise MessageError(f"{path}: key {prefix + str(k)!r} is not a string (quote it)")
        key = prefix + k
        if isinstance(v, dict):
            out.update(_flatten(v, path, key + "."))
        elif isinstance(v, str) or (isinstance(v, list) and v and all(isinstance(x, str) for x in v)):
            out[key] = v
        else:
            raise MessageError(f"{path}: {key}: a message is a string or a list of strings, not {v!r}")
    return out


def _lookup(lang: str, key: str) -> str | list[str]:
    try:
        return catalogue(lang)[key]
    except KeyError:
        raise MessageError(f"{catalogue_path(lang)}: no message {key!r}") from None


def _format(lang: str, key: str, template: str, values: dict) -> str:
    try:
        return template.format(**values)
    except KeyError as e:
        raise MessageError(f"{catalogue_path(lang)}: {key}: no value for placeholder {{{e.args[0]}}}") from None
    except (IndexError, ValueError) as e:
        raise MessageError(f"{catalogue_path(lang)}: {key}: {e}") from None


def msg(lang: str, key: str, **values) -> str:
    """The message `key` in language `lang`, its placeholders filled from `values`."""
    template = _lookup(lang, key)
    if not isinstance(template, str):
        raise MessageError(f"{catalogue_path(lang)}: {key} is a list of messages: use msgs()")
    return _format(lang, key, template, values)


def msgs(lang: str, key: str, **values) -> list[str]:
    """The list of messages `key` (e.g. the paragraphs of one piece of advice), each filled from `values`."""
    templates = _lookup(lang, key)
    if isinstance(templates, str):
        raise MessageError(f"{catalogue_path(lang)}: {key} is one message: use msg()")
    return [_format(lang, key, t, values) for t in templates]
