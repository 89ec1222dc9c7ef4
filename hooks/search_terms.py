"""Keep every Chinese glossary term, tag, topic and typed word one search token (on_config).

Material's search segments Chinese with jieba, which would cut 全归约 into 全 + 归约. The words come
from schemas/glossary.yml, schemas/vocabulary.yml and the string catalogues (plus the short words
readers type, kb.search_terms.TYPED_ZH), so the dictionary is generated, not kept by hand.
"""
import sys
from pathlib import Path

import jieba

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.search_terms import chinese_terms  # noqa: E402


def on_config(config):
    for word in chinese_terms():
        jieba.add_word(word, freq=100000)
    return config
