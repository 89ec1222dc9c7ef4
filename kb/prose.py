"""Page prose: measured-looking numbers cite their source, and each sentence has a line of its own.

A number followed by a bandwidth, throughput, time or speed-up unit (4,800 GB/s, 989 TFLOP/s, 12 µs,
1.97×) reads as a measurement. On this site a measurement is either quoted from a recorded result
with a `<!-- metric ... -->` marker or cites where it comes from: a footnote (`[^id]`) or a web link
in the same sentence. Code, maths, shortcodes, footnote definitions and the references section are
not prose.

A sentence that compares (faster, slower, beats, loses, 倍, 快于, ...) is held to more: a ratio or
percentage in it is quoted or cited too, and where it says the comparison was measured here (measured,
the lab, on the H200, 实测, 实验里, ...) its paragraph quotes the lab with a marker, so that a stale figure
is flagged where the conclusion is drawn.
"""
from __future__ import annotations

import re

_UNIT = r"(?:[KMGTP]i?B/s|[KMGTP]FLOP/s|[KMGTP]FLOPS\b|(?:ms|µs|μs|us|ns)\b|×(?!\s*\d)|x\b(?!\s*\d))"
MEASURED = re.compile(rf"(?<![\w.^-])\d[\d,]*(?:\.\d+)?(?:\s?[–-]\s?\d[\d,]*(?:\.\d+)?)?\s?{_UNIT}")
_CITED = re.compile(r"\[\^[^\]]+\]|\]\(https?://")
_STRIP = [re.compile(p, re.S | re.M) for p in (
    r"^(`{3,}|~{3,}).*?^\1[ \t]*$",      # fenced code
    r"\$\$.*?\$\$", r"(?<!\\)\$[^$\n]+\$",  # maths
    r"``.*?``", r"`[^`\n]*`",              # inline code
    r"<!--.*?-->",                         # shortcodes and comments
    r"^\[\^[^\]]+\]:.*$",                  # footnote definitions (they are the sources)
)]
_SENTENCE = re.compile(r"(?<=[。！？])|(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bvs\.)(?<!\bal\.)(?<=[.!?])\s+(?=[^\s\[])")


_COMPARES = re.compile(
    r"(?i)\b(?:faster|slower|quicker|beats?|beaten|beating|loses?|losing|lost to|outperforms?|outperformed|"
    r"wins?|won|falls? behind|fell behind|ahead of)\b|\d\s?×(?!\s*\d)|更快|更慢|快于|慢于|快过|慢过|胜过|赢|"
    r"输给|输于|落后|领先|提速|反而慢|略慢|不如|比[^，。；：]{1,30}?[快慢]")
_RATIO = re.compile(r"(?<![\w.^-])\d[\d,]*(?:\.\d+)?\s?(?:%|倍)")
_HERE = re.compile(r"(?i)\bmeasured\b|\brecorded\b|\b(?:the|this|our) lab\b|\bon (?:the|an|one) H200\b|实测|测得|测出|"
                   r"记录的|在 H200 上|本实验|实验里|实验中")
_MARKER = re.compile(r"<!--\s*metric\s")


def _blank(match: re.Match) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def uncited(body: str, references_heading: str) -> list[tuple[int, str]]:
    """(line number in `body`, the number) for each measured-looking figure with no citation."""
    text = body.split(f"\n## {references_heading}", 1)[0]
    for pattern in _STRIP:
        text = pattern.sub(_blank, text)
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for sentence in _sentences(line):
            if _CITED.search(sentence):
                continue
            found += [(lineno, m.group(0)) for m in MEASURED.finditer(sentence)]
    return found


def _paragraphs(raw_lines: list[str]) -> list[int]:
    """For each line, the index of its paragraph (a run of non-blank lines; a table is one paragraph)."""
    ids, current, blank = [], 0, True
    for line in raw_lines:
        if not line.strip():
            current += 0 if blank else 1
            blank = True
        blank = blank and not line.strip()
        ids.append(current)
    return ids


def unquoted_comparisons(body: str, references_heading: str) -> list[tuple[int, str, str]]:
    """(line number in `body`, 'ratio' or 'conclusion', the sentence) for each comparison that should quote
    a recorded result (module docstring) and does not."""
    raw = body.split(f"\n## {references_heading}", 1)[0]
    text = raw
    for pattern in _STRIP:
        text = pattern.sub(_blank, text)
    raw_lines = raw.splitlines()
    para = _paragraphs(raw_lines)
    quoted = {para[i] for i, line in enumerate(raw_lines) if _MARKER.search(line)}
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        for sentence in _sentences(line):
            if not _COMPARES.search(sentence) or _CITED.search(sentence):
                continue
            if _RATIO.search(sentence):
                found.append((lineno, "ratio", sentence.strip()))
            elif _HERE.search(sentence) and para[lineno - 1] not in quoted:
                found.append((lineno, "conclusion", sentence.strip()))
    return found


def crowded_lines(body: str, references_heading: str) -> list[int]:
    """Line numbers of prose lines that hold more than one sentence (pages keep one per line for diffs)."""
    text = body.split(f"\n## {references_heading}", 1)[0]
    for pattern in _STRIP:
        text = pattern.sub(_blank, text)
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        bare = re.sub(r"^\s*(?:[-*+]|\d+\.)\s+", "", line).strip()
        if not bare or bare[0] in "|#" or bare.startswith(("!!!", "???")):
            continue
        if sum(1 for s in _sentences(bare) if re.search(r"\w", s)) > 1:
            found.append(lineno)
    return found


def _sentences(line: str) -> list[str]:
    """Split a line into sentences; footnote marks right after a full stop stay with its sentence."""
    parts = _SENTENCE.split(line)
    out: list[str] = []
    for part in parts:
        lead = re.match(r"^\s*((?:\[\^[^\]]+\])+)", part)
        if lead and out:
            out[-1] += lead.group(1)
        out.append(part)
    return out


def spoken_length(text: str) -> int:
    """How long a passage is to say: Chinese characters plus Latin words, with markup, links' targets,
    footnote marks, shortcodes and maths left out."""
    text = re.sub(r"<!--.*?-->|\[\^[^\]]+\]|\$[^$\n]+\$", " ", text, flags=re.S)
    text = re.sub(r"\]\([^)]*\)", "] ", text)
    han = len(re.findall(r"[\u4e00-\u9fff]", text))
    words = len(re.findall(r"[A-Za-z0-9][A-Za-z0-9.+'’_/-]*", text))
    return han + words

