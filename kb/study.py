"""The study path: every question page in three tracks, in order, from the pages' front matter.

A question belongs to a track when its topic folder or one of its tags is the track's; within a track
the questions go from the easiest difficulty to the hardest, and in navigation order within one
difficulty. hooks/study_path.py writes the result into docs/study-path(.en).md, so it cannot go stale.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from kb.pages import VOCAB, is_question, split_front_matter
from kb.render import md_text
from kb.strings import t

# zh tags (the keys of schemas/vocabulary.yml); a page's .en.md twin is matched through the vocabulary.
TRACKS = {
    "training": {"topics": ["distributed", "training", "moe"],
                 "tags": ["分布式通信", "NCCL", "MoE", "强化学习", "并行训练"]},
    "inference": {"topics": ["inference"], "tags": ["推理", "KV 缓存", "量化"]},
    "kernels": {"topics": ["kernels", "agents"],
                "tags": ["算子融合", "CUDA", "Triton", "CUTLASS", "Hopper", "GPU 架构"]},
}
MARKER = "<!-- study-path -->"


@dataclass
class Question:
    src: str          # docs-relative path of the zh page: kernels/fusion-slowdown.md
    title: str
    difficulty: str   # in the page's language
    level: int        # 0 = easiest
    tags: list[str]   # in the page's language
    tags_zh: list[str]


def questions(docs: Path, lang: str) -> list[Question]:
    levels = list(VOCAB["difficulty"])
    out = []
    for page in sorted(docs.glob("*/*.md")):
        rel = page.relative_to(docs).as_posix()
        if rel.endswith(".en.md") or not is_question(rel):
            continue
        source = page.with_name(page.stem + ".en.md") if lang == "en" else page
        if not source.is_file():
            source = page
        meta, _ = split_front_matter(source.read_text(encoding="utf-8"), rel)
        zh_meta = meta if source == page else split_front_matter(page.read_text(encoding="utf-8"), rel)[0]
        out.append(Question(rel, meta["title"], meta["difficulty"], levels.index(zh_meta["difficulty"]),
                            list(meta["tags"]), list(zh_meta["tags"])))
    return out


def tracks(qs: list[Question], nav_order: list[str]) -> dict[str, list[Question]]:
    def rank(q):
        return (q.level, nav_order.index(q.src) if q.src in nav_order else len(nav_order), q.src)

    return {name: sorted((q for q in qs if q.src.split("/")[0] in spec["topics"]
                          or set(q.tags_zh) & set(spec["tags"])), key=rank)
            for name, spec in TRACKS.items()}


def _checkbox(name: str, value: str, checked: bool) -> str:
    v = html.escape(value, quote=True)
    return (f'<label class="kb-chip"><input type="checkbox" name="{name}" value="{v}"'
            f'{" checked" if checked else ""}> {html.escape(value)}</label>')


def markdown(docs: Path, lang: str, nav_order: list[str]) -> str:
    """The study path as Markdown (with raw HTML): a filter form, then one ordered list per track."""
    qs = questions(docs, lang)
    levels = [v if lang == "en" else k for k, v in VOCAB["difficulty"].items()]
    used_levels = [lv for lv in levels if any(q.difficulty == lv for q in qs)]
    used_tags = sorted({tag for q in qs for tag in q.tags}, key=str.lower)
    form = [f'<form class="kb-filter" data-shown="{html.escape(t(lang, "study.shown", n="{n}"), quote=True)}" hidden>',
            f'<fieldset><legend>{t(lang, "study.difficulty")}</legend>'
            + " ".join(_checkbox("difficulty", lv, True) for lv in used_levels) + "</fieldset>",
            f'<fieldset><legend>{t(lang, "study.tags")}</legend>'
            + " ".join(_checkbox("tag", tag, False) for tag in used_tags) + "</fieldset>",
            '<p class="kb-filter__count" aria-live="polite"></p>', "</form>", ""]
    parts = ["\n".join(form)]
    for name, items in tracks(qs, nav_order).items():
        parts.append(f'## {t(lang, f"study.tracks.{name}")} {{ #{name} }}\n\n{t(lang, f"study.intros.{name}")}\n')
        lis = []
        for q in items:
            tags = "|".join(q.tags)
            badges = " ".join(f'<span class="kb-tag">{html.escape(tag)}</span>' for tag in q.tags)
            lis.append(f'<li data-difficulty="{html.escape(q.difficulty, quote=True)}" '
                       f'data-tags="{html.escape(tags, quote=True)}" markdown>'
                       f'[{md_text(q.title)}]({q.src}) '
                       f'<span class="kb-badge kb-difficulty">{html.escape(q.difficulty)}</span> {badges}</li>')
        parts.append('<ol class="kb-track" markdown>\n' + "\n".join(lis) + "\n</ol>\n"
                     f'<p class="kb-track__none" hidden>{t(lang, "study.none")}</p>\n')
    return "\n".join(parts)
