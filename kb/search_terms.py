"""What the search index needs beyond the page text: the Chinese words it keeps whole, the other
spellings and abbreviations of English terms, and the page chrome it leaves out.

hooks/search_terms.py gives the Chinese words to jieba; hooks/search_split.py writes one index per
language and puts `index_terms(...)` of each entry into a field of its own, which the search matches
and the reader never sees (the result list shows only the title and the text).
"""
from __future__ import annotations

import functools
import re

from kb.glossary import terms
from kb.pages import VOCAB
from kb.strings import catalogue

_HAN = re.compile(r"[\u4e00-\u9fff]")

# Short Chinese words readers type that jieba would cut or that the index should carry as a key term.
TYPED_ZH = ["分页", "生产者", "消费者", "投机", "量化", "融合", "超时", "死锁", "挂起", "卡住", "显存", "带宽", "延迟", "吞吐", "批处理",
            "调度", "路由", "负载均衡", "专家", "专家并行", "张量并行", "流水线并行", "数据并行", "流水线", "预填充", "解码", "注意力", "智能体",
            "奖励", "异步", "屏障", "寄存器", "共享内存", "算子", "内核", "访存", "融合算子", "编译器", "分块", "前缀缓存", "采样", "权重同步",
            "训练", "推理", "通信", "重叠", "张量核心", "线程块", "飞行记录器", "大模型", "变慢"]

# -ise/-ize (and -isation/-ization ...) both spelled: the stems this site uses.
_IZE_STEMS = ["special", "quant", "dequant", "optim", "util", "synchron", "normal", "initial", "serial",
              "parallel", "vector", "minim", "maxim", "amort", "real", "visual", "organ", "summar", "general",
              "local", "custom", "categor", "prior", "standard", "central", "stabil", "recogn", "emphas",
              "character", "token", "material", "modern", "random", "capital", "memor", "penal", "fertil"]
_IZE = re.compile(r"\b(" + "|".join(_IZE_STEMS) + r")i[sz](e|ed|es|ing|er|ers|ation|ations)\b", re.I)
_OTHER_SPELLINGS = [("behaviour", "behavior"), ("analyse", "analyze"), ("analysed", "analyzed"),
                    ("modelling", "modeling"), ("labelled", "labeled"), ("centre", "center"),
                    ("favour", "favor"), ("colour", "color"), ("cancelled", "canceled"), ("signalling", "signaling")]

# Abbreviations readers type, with what they stand for (English, and Chinese where the zh pages say it).
ABBREVIATIONS = {
    "TP": ["tensor parallel", "tensor parallelism", "张量并行"],
    "PP": ["pipeline parallel", "pipeline parallelism", "流水线并行"],
    "EP": ["expert parallel", "expert parallelism", "专家并行"],
    "DP": ["data parallel", "data parallelism", "数据并行"],
    "KV": ["KV cache", "key-value cache", "KV 缓存"],
    "WS": ["warp specialization", "warp specialisation", "warp-specialized", "warp-specialised", "warp 专用化"],
    "TMA": ["Tensor Memory Accelerator"],
    "FR": ["Flight Recorder", "飞行记录器"],
    "MoE": ["mixture of experts", "mixture-of-experts", "混合专家"],
    "RL": ["reinforcement learning", "强化学习"],
    "GQA": ["grouped-query attention"],
    "MLA": ["multi-head latent attention"],
    "SM": ["streaming multiprocessor"],
}

# Page chrome that is not content: notebook prompts, heading pilcrows, the copy button's label.
_CHROME = re.compile(r"(?:\b(?:In|Out)\s*\[\s*\d*\s*\]:)|¶|\bCopied!")


@functools.cache
def chinese_terms() -> list[str]:
    words = [term["zh"] for term in terms()] + [a for term in terms() for a in term.get("aliases", [])]
    words += list(VOCAB["tags"]) + list(catalogue("zh")["topics"].values()) + TYPED_ZH
    return sorted({w for w in words if _HAN.search(w) and " " not in w})


def strip_chrome(text: str) -> str:
    """The index text without prompts (`In [1]:`), pilcrows and "Copied!"; runs of spaces left behind shrink to one."""
    return re.sub(r"[ \u00a0]{2,}", " ", _CHROME.sub("", text)).strip()


def _other_spellings(word: str) -> set[str]:
    out = set()
    m = _IZE.fullmatch(word)
    if m:
        out |= {f"{m.group(1)}is{m.group(2)}".lower(), f"{m.group(1)}iz{m.group(2)}".lower()}
    for pair in _OTHER_SPELLINGS:
        if word.lower() in pair:
            out |= set(pair)
    return out - {word.lower()}


def _count(text: str, phrase: str) -> int:
    if _HAN.search(phrase):
        return text.replace(" ", "").count(phrase.replace(" ", ""))
    flags = 0 if phrase.isupper() else re.I  # TP is the abbreviation, tp is not
    return len(re.findall(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", text, flags))


@functools.cache
def _groups() -> list[list[str]]:
    """Words that name the same thing: each glossary term in both languages with its aliases, each tag."""
    groups = [[term["zh"], term["en"], *term.get("aliases", [])] for term in terms()]
    return groups + [[zh, en] for zh, en in VOCAB["tags"].items() if zh != en]


def index_terms(text: str) -> list[str]:
    """Words a search for this text should also match, once per occurrence of what they stand for:
    other spellings of its English words, the other language's name of its glossary terms and tags,
    its Chinese key words. `text` is an entry's title or text with U+200B removed."""
    out: list[str] = []
    for word in re.findall(r"[A-Za-z]+", text):
        out += sorted(_other_spellings(word))
    for group in _groups():
        for form in group:
            out += [w for w in group if w != form] * _count(text, form)
    out += [w for w in chinese_terms() for _ in range(text.count(w))]
    return out


def abbreviation_terms(text: str) -> list[str]:
    """Each abbreviation (and what it stands for) once per time the text uses either."""
    out: list[str] = []
    for abbr, expansions in ABBREVIATIONS.items():
        n = sum(_count(text, p) for p in [abbr, *expansions])
        out += [abbr, *(p for p in expansions if not _HAN.search(p))] * n
    return out


def mark_short_tokens(text: str) -> str:
    """Append U+2060 (word joiner, invisible) to each one-character Chinese token of jieba-segmented
    text (U+200B between tokens) that begins a word readers type (chinese_terms).

    Material's search cuts a Chinese query into the index's tokens and never takes the query's last
    character as part of one: with 分 a token, 分页 became the query 分* (every word that starts with
    分) and ranked pages that say 分钟 or 分布 first. With no such one-character token, a two-character
    query stays whole, and a longer one starts with its longest word; a query for the character alone
    still matches the marked token, whose prefix it is."""
    starts = {w[0] for w in chinese_terms()}

    def mark(m: re.Match) -> str:
        tok = m.group(0)
        return tok + "\u2060" if len(tok) == 1 and tok in starts else tok
    return re.sub(r"[\u4e00-\u9fff]+", mark, text)
