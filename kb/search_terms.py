"""The Chinese words the search index must keep whole: glossary terms and aliases, tags, topics."""
from __future__ import annotations

import re

from kb.glossary import terms
from kb.pages import VOCAB
from kb.strings import catalogue

_HAN = re.compile(r"[\u4e00-\u9fff]")


def chinese_terms() -> list[str]:
    words = [term["zh"] for term in terms()] + [a for term in terms() for a in term.get("aliases", [])]
    words += list(VOCAB["tags"]) + list(catalogue("zh")["topics"].values())
    return sorted({w for w in words if _HAN.search(w) and " " not in w})
