"""Results and labs as Markdown and HTML: lab cards, lab page headers, quoted numbers, provenance.

Everything the reader sees of a result is drawn here from a verified `kb.results.Result`, with the
words from `kb.strings`; the hooks only place it.
"""
from __future__ import annotations

import html
from pathlib import Path

from kb.labs import ROOT, colab_url, lab_meta, read_notebook, title_zh
from kb.markers import Marker
from kb.results import Result, result_for
from kb.strings import t


# Text from data (device names, labels, units, column names, titles) goes into Markdown that becomes HTML.
# Besides the HTML characters, every character a Markdown or pymdownx inline pattern starts from is written
# as a character reference, so no code span, emphasis, link, math ($), table column (|) or attribute list
# can begin inside it, and it reads the same in Markdown, in raw HTML and in a "..." link title.
_MD_SAFE = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
                          **{c: f"&#{ord(c)};" for c in "\\`*_[]{}|$~^"}})


def md_text(text) -> str:
    """Data as literal text anywhere in Markdown or HTML (a table cell, a link text or title, an admonition
    title, a raw-HTML element or attribute): one line, no markup."""
    return " ".join(str(text).split()).translate(_MD_SAFE)


def fmt(v) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"  # sizes and shapes: 8,192 rather than 8192.0
    return f"{v:,.4g}" if isinstance(v, float) else str(v)


def hardware_needs(notebook: str, lang: str) -> list[str]:
    meta = lab_meta(ROOT / notebook)
    needs = [t(lang, "needs_arch", arch="sm_" + meta.capability.replace(".", ""))] if meta.capability else []
    if meta.gpus == 1:
        needs.append(t(lang, "needs_one_gpu"))
    elif meta.gpus > 1:
        needs.append(t(lang, "needs_gpus", n=meta.gpus))
    else:
        needs.append(t(lang, "runs_on_cpu"))
    return needs


def state(result: Result, lang: str) -> str:
    """fresh, legacy, or stale with the inputs that changed since the run."""
    if result.fresh:
        return t(lang, "legacy") if result.legacy else t(lang, "fresh")
    files = ", ".join(result.stale[:3]) + (" …" if len(result.stale) > 3 else "")
    stale = f"{t(lang, 'stale')} ({t(lang, 'stale_files', files=files)})"
    return f"{t(lang, 'legacy')} · {stale}" if result.legacy else stale


def provenance(result: Result, lang: str) -> str:
    d, data = result.data["device"], result.data
    parts = [d["name"] + (f" ×{d['count']}" if d.get("count", 1) > 1 else ""),
             f"driver {d.get('driver')}", f"CUDA {d.get('cuda')}", f"torch {d['torch']}",
             f"Triton {d.get('triton')}", data["executed_at"][:10]]
    if result.commit:
        parts.append(f"{t(lang, 'commit')} {result.commit[:10]}")
    parts += [f"{t(lang, 'mode')} {data.get('lab_mode')}", state(result, lang)]
    return " · ".join(parts)


def metrics_table(result: Result, lang: str) -> str:
    data = result.data
    lines = [f"| {t(lang, 'metric')} | {t(lang, 'value')} |", "| --- | ---: |"]
    for name, value in data["metrics"].items():
        label = data["labels"][name]
        lines.append(f"| {md_text(label.get(lang, name))} | {fmt(value)} {md_text(label.get('unit', ''))} |")
    return "\n".join(lines)


def data_tables(result: Result, lang: str) -> str:
    """Every recorded table (a sweep over sizes, say) as a collapsible Markdown block."""
    blocks = []
    for table in result.data.get("tables", {}).values():
        head = "| " + " | ".join(md_text(c) for c in table["columns"]) + " |"
        rule = "| " + " | ".join("---:" for _ in table["columns"]) + " |"
        rows = ["| " + " | ".join(md_text(fmt(v)) for v in row) + " |" for row in table["rows"]]
        body = "\n".join("    " + line for line in [head, rule, *rows])
        blocks.append(f'??? info "{md_text(table[lang])}"\n\n{body}\n')
    return "\n".join(blocks)


def _badges(notebook: str, lang: str) -> str:
    colab = (f'<a class="kb-badge kb-colab" href="{html.escape(colab_url(notebook))}" '
             f'target="_blank" rel="noopener">{t(lang, "colab")}</a>')
    return colab + "".join(f' <span class="kb-badge kb-needs">{html.escape(n)}</span>'
                           for n in hardware_needs(notebook, lang))


def banner(result: Result | None, lang: str) -> str:
    if result is None:
        return f'<p class="kb-provenance kb-none">{t(lang, "no_result")}</p>'
    css = "kb-fresh" if result.fresh and not result.legacy else "kb-stale"
    return (f'<p class="kb-provenance {css}">{t(lang, "gpu_result")}: '
            f'{md_text(provenance(result, lang))}</p>')


def lab_header(notebook: str, result: Result | None, lang: str) -> str:
    return f'<div class="kb-lab-header"><p>{_badges(notebook, lang)}</p>{banner(result, lang)}</div>\n'


def lab_link(notebook: str, page_dir: str) -> str:
    return "../" * len(Path(page_dir).parts) + f"labs/{Path(notebook).name}"


def lab_card(notebook: str, lang: str, page_dir: str) -> str:
    """Markdown for a question page: link, badges, the recorded metrics and where they come from."""
    nb = read_notebook(ROOT / notebook)
    title = title_zh(nb) if lang == "zh" else lab_meta(ROOT / notebook, nb).title_en
    result = result_for(notebook)
    parts = ['<div class="kb-lab-card" markdown>', "",
             f"**[{md_text(title)}]({lab_link(notebook, page_dir)})**", "",
             _badges(notebook, lang), "", banner(result, lang), ""]
    if result is not None:
        parts += [metrics_table(result, lang), "", data_tables(result, lang)]
    parts.append("</div>")
    return "\n".join(parts)


def quote(marker: Marker, lang: str, page_dir: str, default_gpu: str | None = None) -> str:
    """A metric shortcode as its recorded value, linked to the lab, flagged when not fresh."""
    if not (ROOT / marker.lab).is_file():
        raise ValueError(f"metric {marker.args[1]}: there is no {marker.lab}")
    gpu = marker.options.get("gpu", default_gpu)
    result = result_for(marker.lab, gpu)
    name = marker.args[1]
    if result is None:
        raise ValueError(f"metric {name}: {marker.lab} has no verified result for GPU {gpu or 'default'}")
    if name not in result.data["metrics"]:
        raise ValueError(f"{marker.lab}'s result has no metric {name!r} (it has {', '.join(result.data['metrics'])})")
    value, unit = result.data["metrics"][name], result.data["labels"][name].get("unit", "")
    if "%" in marker.args:
        text = f"{value * 100:.3g}%"
    else:
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"  # 4,267 GB/s; 1.97×; 0.933
        text += md_text(unit) if unit == "×" else f" {md_text(unit)}" if unit else ""
    link, where = lab_link(marker.lab, page_dir), md_text(provenance(result, lang))
    out = f'[{text}]({link} "{where}")'
    if "gpu" in marker.options:
        out += f" ({md_text(result.data['device']['name'])})"
    out += source_mark(f"kb-src-{marker.line}-{marker.span[0]}", where, link, lang, not result.fresh)
    if not result.fresh:
        out += f' <span class="kb-flag">{t(lang, "quote_stale")}</span>'
    elif result.legacy:
        out += f' <span class="kb-flag">{t(lang, "quote_legacy")}</span>'
    return out


def source_mark(mark_id: str, where: str, link: str, lang: str, stale: bool) -> str:
    """A visible mark beside a quoted number: a button (tap, click, Enter or Space; docs/javascripts/kb.js)
    that opens a small note with the number's provenance and a link to its lab page. `where` is md_text."""
    css = "kb-src kb-src--stale" if stale else "kb-src"
    return (f'<span class="{css}"><button type="button" class="kb-src-mark" aria-expanded="false" '
            f'aria-controls="{mark_id}" aria-label="{t(lang, "quote_source")}">{t(lang, "quote_mark")}</button>'
            f'<span class="kb-src-pop" id="{mark_id}" role="note" hidden>{where} · '
            f'[{t(lang, "quote_open_lab")}]({link})</span></span>')


def sources(markers_: list[Marker], lang: str, default_gpu: str | None = None) -> str:
    """One visible line per result a page quotes: the GPU, versions, date, commit and state."""
    seen: dict[tuple, Result] = {}
    for m in markers_:
        if m.name == "metric":
            gpu = m.options.get("gpu", default_gpu)
            r = result_for(m.lab, gpu)
            if r is not None:
                seen[(m.lab, r.gpu)] = r
    if not seen:
        return ""
    items = "\n".join(f"- `{Path(lab).stem}`: {md_text(provenance(r, lang))}"
                      for (lab, _), r in sorted(seen.items()))
    return f'??? note "{t(lang, "sources")}"\n\n' + "\n".join("    " + ln for ln in items.splitlines()) + "\n"


def freshness_table(lang: str, page_dir: str) -> str:
    """Every lab with the state of its GPU result (kb/freshness.py): GPU, state, commit, date, duration and,
    for a stale one, the inputs that changed since the run."""
    from kb.freshness import lab_states

    head = t(lang, "freshness_head")
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(["---"] * (len(head) - 1) + ["---:"]) + " |"]
    for s in lab_states():
        r = s.result
        link = f"[{md_text(s.stem)}]({lab_link(s.notebook, page_dir)})"
        words = t(lang, f"freshness_state.{s.state}")
        if s.state == "stale":
            words += " · " + md_text(t(lang, "stale_files", files=", ".join(s.changed)))
        if r is not None and r.legacy and s.state != "legacy":
            words += " · " + t(lang, "legacy")
        cells = [link, md_text(r.data["device"]["name"]) if r else "–", words,
                 f"`{r.commit[:10]}`" if r and r.commit else "–", r.data["executed_at"][:10] if r else "–",
                 fmt(float(r.data["seconds"])) if r else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
