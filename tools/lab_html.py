"""HTML and Markdown for labs on the site: the lab page header and the card on question pages."""
from __future__ import annotations

import html
from pathlib import Path

from kb.labs import ROOT, colab_url, hardware_needs, lab_meta, read_notebook, title_zh
from kb.results import Result, data_tables, metrics_table, provenance

WORDS = {
    "zh": {"colab": "在 Colab 中打开", "none": "尚无 GPU 结果：以下为未执行的笔记本。",
           "result": "GPU 结果", "open": "打开实验", "notebook": "下载笔记本"},
    "en": {"colab": "Open in Colab", "none": "No GPU result yet: the notebook below is not executed.",
           "result": "GPU result", "open": "Open the lab", "notebook": "Download notebook"},
}


def _badges(notebook: str, lang: str) -> str:
    meta = lab_meta(ROOT / notebook)
    colab = (f'<a class="kb-badge kb-colab" href="{html.escape(colab_url(notebook))}" '
             f'target="_blank" rel="noopener">{WORDS[lang]["colab"]}</a>')
    needs = "".join(f' <span class="kb-badge kb-needs">{html.escape(n)}</span>'
                    for n in hardware_needs(meta, lang))
    return colab + needs


def _banner(result: Result | None, lang: str) -> str:
    if result is None:
        return f'<p class="kb-provenance kb-none">{WORDS[lang]["none"]}</p>'
    state = "kb-fresh" if result.fresh else "kb-stale"
    return (f'<p class="kb-provenance {state}">{WORDS[lang]["result"]}: '
            f'{html.escape(provenance(result.data, lang, result.fresh))}</p>')


def lab_header(notebook: str, result: Result | None, lang: str) -> str:
    return f'<div class="kb-lab-header"><p>{_badges(notebook, lang)}</p>{_banner(result, lang)}</div>\n'


def lab_card(notebook: str, result: Result | None, lang: str, page_dir: str) -> str:
    """Markdown for a question page: link, badges, the recorded metrics and where they come from."""
    nb = read_notebook(ROOT / notebook)
    title = title_zh(nb) if lang == "zh" else lab_meta(ROOT / notebook, nb).title_en
    depth = len(Path(page_dir).parts)
    link = "../" * depth + f"labs/{Path(notebook).name}"
    parts = [f'<div class="kb-lab-card" markdown>', "",
             f"**[{title}]({link})**", "", _badges(notebook, lang), "", _banner(result, lang), ""]
    if result is not None:
        parts += [metrics_table(result.data, lang), "", data_tables(result.data, lang)]
    parts.append("</div>")
    return "\n".join(parts)
