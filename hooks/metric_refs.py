"""Replace `<!-- metric STEM NAME -->` in a page with that metric of the lab's newest GPU result
(on_page_markdown): the value and its unit, linked to the lab page, with the GPU and date as the link's
title. `<!-- metric STEM NAME % -->` shows a fraction as a percentage. Prose can then quote a measured
number without typing it; an unknown lab, a lab with no result or an unknown metric fails the build."""
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.labs import ROOT  # noqa: E402
from kb.results import newest_result  # noqa: E402

PATTERN = re.compile(r"<!-- metric ([\w.-]+) ([a-z][a-z0-9_]*)( %)? -->")


def render(stem: str, name: str, percent: bool, page_dir: str) -> str:
    notebook = f"notebooks/{stem}.ipynb"
    if not (ROOT / notebook).is_file():
        raise ValueError(f"metric {name}: there is no {notebook}")
    result = newest_result(notebook)
    if result is None:
        raise ValueError(f"metric {name}: {notebook} has no GPU result under results/")
    data = result.data
    if name not in data["metrics"]:
        raise ValueError(f"{notebook}'s result has no metric {name!r} (it has {', '.join(data['metrics'])})")
    value, unit = data["metrics"][name], data["labels"].get(name, {}).get("unit", "")
    if percent:
        text = f"{value * 100:.3g}%"
    else:
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"  # 4,267 GB/s; 1.97×; 0.933
        text += unit if unit == "×" else f" {unit}" if unit else ""
    link = "../" * len(Path(page_dir).parts) + f"labs/{stem}.ipynb"
    return f'[{text}]({link} "{data["device"]["name"]} · {data["executed_at"][:10]}")'


def on_page_markdown(markdown, page, config, files):
    page_dir = str(Path(page.file.src_uri).parent)
    try:
        return PATTERN.sub(lambda m: render(m.group(1), m.group(2), bool(m.group(3)), page_dir), markdown)
    except ValueError as e:
        raise PluginError(f"{page.file.src_uri}: {e}") from e
