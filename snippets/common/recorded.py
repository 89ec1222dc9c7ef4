"""Recorded GPU results of a lab, as Markdown: used by the site's lab cards and by notebooks
that cannot run a part on the machine at hand (a Colab T4 shows the H200's numbers instead)."""
from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORDS = {
    "zh": {"metric": "指标", "value": "数值", "fresh": "与当前代码一致", "stale": "代码已变更，结果过期",
           "mode": "规模"},
    "en": {"metric": "Metric", "value": "Value", "fresh": "matches the current code", "stale": "stale: code changed since",
           "mode": "size"},
}


def recorded(stem: str) -> list[dict]:
    """Every results/<gpu>/<stem>.json, newest first."""
    found = [json.loads(p.read_text(encoding="utf-8")) for p in (ROOT / "results").glob(f"*/{stem}.json")]
    return sorted(found, key=lambda d: d["executed_at"], reverse=True)


def _fmt(v) -> str:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"  # sizes and shapes: 8,192 rather than 8192.0
    return f"{v:,.4g}" if isinstance(v, float) else str(v)


def metrics_table(data: dict, lang: str = "zh") -> str:
    w = WORDS[lang]
    lines = [f"| {w['metric']} | {w['value']} |", "| --- | ---: |"]
    for name, value in data["metrics"].items():
        label = data.get("labels", {}).get(name, {})
        lines.append(f"| {label.get(lang, name)} | {_fmt(value)} {label.get('unit', '')} |")
    return "\n".join(lines)


def data_tables(data: dict, lang: str = "zh") -> str:
    """Every recorded table (a sweep over sizes, say) as a collapsible Markdown block."""
    blocks = []
    for table in data.get("tables", {}).values():
        head = "| " + " | ".join(table["columns"]) + " |"
        rule = "| " + " | ".join("---:" for _ in table["columns"]) + " |"
        rows = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in table["rows"]]
        body = "\n".join("    " + line for line in [head, rule, *rows])
        blocks.append(f'??? info "{table[lang]}"\n\n{body}\n')
    return "\n".join(blocks)


def provenance(data: dict, lang: str = "zh", fresh: bool | None = None) -> str:
    d = data["device"]
    parts = [f"{d['name']}" + (f" ×{d['count']}" if d.get("count", 1) > 1 else ""),
             f"driver {d.get('driver')}", f"CUDA {d.get('cuda')}", f"torch {d['torch']}",
             f"Triton {d.get('triton')}", data["executed_at"][:10],
             f"{WORDS[lang]['mode']} {data.get('lab_mode', 'full')}"]
    if fresh is not None:
        parts.append(WORDS[lang]["fresh"] if fresh else WORDS[lang]["stale"])
    return " · ".join(parts)


def show(stem: str, lang: str = "zh") -> None:
    """Display every recorded GPU result of a lab in a notebook."""
    from IPython.display import Markdown, display

    results = recorded(stem)
    if not results:
        print(f"no recorded GPU result for {stem} yet")
    for data in results:
        display(Markdown(f"**{provenance(data, lang)}**\n\n{metrics_table(data, lang)}"))
