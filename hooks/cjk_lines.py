"""Join the lines of Chinese prose without a space (on_page_content).

Pages keep one sentence per line for readable diffs; a browser shows each line break inside a
paragraph as a space, which Chinese text does not have. A break between a Chinese full stop (or
other CJK punctuation) and the next line is dropped outside <pre>.
"""
import re

_PRE = re.compile(r"(<pre\b.*?</pre>)", re.S)
_BREAK = re.compile(r"(?<=[。！？；：，、）」』”])\n(?=[^\s<])")


def on_page_content(html, page, config, files):
    parts = _PRE.split(html)
    return "".join(p if p.startswith("<pre") else _BREAK.sub("", p) for p in parts)
