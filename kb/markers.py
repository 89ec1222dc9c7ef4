"""The one grammar of in-page shortcodes: `<!-- NAME [ARG ...] [KEY=VALUE ...] -->`.

    <!-- metric 02-kernel-fusion fused_speedup -->            a recorded number, quoted
    <!-- metric 00-gpu-ceilings ridge_point_flop_per_byte % gpu=nvidia-h200 -->
    <!-- lab-cards -->    <!-- lab-index -->    <!-- glossary -->    <!-- study-path -->    <!-- freshness -->

An HTML comment whose first word is not a shortcode name is an ordinary comment and is left alone;
one whose first word is a shortcode but whose arguments break its signature is an error naming the
file and the line. Comments inside code fences are code, not shortcodes.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

_COMMENT = re.compile(r"<!--(.*?)-->", re.S)
_FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
_STEM = re.compile(r"^\d\d-[a-z0-9]+(-[a-z0-9]+)*$")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


class MarkerError(ValueError):
    """A shortcode breaks the grammar; the message names the file and the line."""


@dataclass(frozen=True)
class Marker:
    name: str
    args: tuple[str, ...]
    options: dict = field(default_factory=dict, hash=False)
    line: int = 0
    span: tuple[int, int] = (0, 0)

    @property
    def lab(self) -> str:
        """The notebook a metric marker quotes (notebooks/<stem>.ipynb)."""
        return f"notebooks/{self.args[0]}.ipynb"


def _check_metric(m: Marker) -> str | None:
    pos = [a for a in m.args if a != "%"]
    if len(pos) != 2 or not _STEM.match(pos[0]) or not _NAME.match(pos[1]):
        return "wants <!-- metric NN-lab-stem metric_name [%] [gpu=gpu-slug] -->"
    if m.args.count("%") > 1 or (m.args.count("%") and m.args[-1] != "%"):
        return "'%' comes once, after the metric name"
    if set(m.options) - {"gpu"} or ("gpu" in m.options and not _SLUG.match(m.options["gpu"])):
        return "takes one option, gpu=<results folder slug>"
    return None


def _no_args(m: Marker) -> str | None:
    return f"takes no arguments: <!-- {m.name} -->" if m.args or m.options else None


SIGNATURES: dict[str, Callable[[Marker], str | None]] = {
    "metric": _check_metric, "lab-cards": _no_args, "lab-index": _no_args, "glossary": _no_args,
    "study-path": _no_args, "freshness": _no_args,
}


def _fenced_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in _FENCE.finditer(text)]


def find(text: str, where: str) -> list[Marker]:
    """Every shortcode in `text`, checked against its signature."""
    fences = _fenced_spans(text)
    found = []
    for c in _COMMENT.finditer(text):
        words = c.group(1).split()
        if not words or words[0] not in SIGNATURES or any(a <= c.start() < b for a, b in fences):
            continue
        line = text.count("\n", 0, c.start()) + 1
        args = tuple(w for w in words[1:] if "=" not in w)
        options = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        marker = Marker(words[0], args, options, line, c.span())
        why = SIGNATURES[words[0]](marker)
        if why:
            raise MarkerError(f"{where}:{line}: {c.group(0)!r} {why}")
        found.append(marker)
    return found


def replace(text: str, where: str, render: dict[str, Callable[[Marker], str]]) -> str:
    """Replace every shortcode that `render` knows by what its function returns; leave the others."""
    out, last = [], 0
    for m in find(text, where):
        if m.name in render:
            out += [text[last:m.span[0]], render[m.name](m)]
            last = m.span[1]
    return "".join(out) + text[last:]
