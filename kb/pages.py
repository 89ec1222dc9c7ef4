"""The question-page contract: front matter, section order, shortcodes, lab links, code blocks, prose.

Used by hooks/front_matter.py at build time and by the tests on every page and on broken fixtures.
A page's labs follow from what it uses: every lab it quotes with a metric shortcode, and a lab for
every snippet it includes that a lab imports, must be listed in its front matter `labs:`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import yaml

from kb import markers, prose
from kb.labs import notebook_modules

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "schemas/front_matter.schema.json").read_text(encoding="utf-8"))
VOCAB = yaml.safe_load((ROOT / "schemas/vocabulary.yml").read_text(encoding="utf-8"))
LAB_MARKER = "<!-- lab-cards -->"
_INCLUDE = re.compile(r'^\s*--8<-- "([^":]+)(?::[^"]*)?"', re.M)
CODE_LANGS = {"python", "py", "cuda", "cpp", "c++", "c", "cu"}
_FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+.-]*)[^\n]*\n(.*?)^\1\s*$", re.M | re.S)


class PageError(ValueError):
    """A question page breaks the contract; the message names the file."""


def split_front_matter(text: str, where: str) -> tuple[dict, str]:
    if not text.startswith("---\n"):
        raise PageError(f"{where}: no front matter (the file must start with a '---' line)")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise PageError(f"{where}: front matter is not closed by a '---' line")
    try:
        meta = yaml.safe_load(text[4:end])
    except yaml.YAMLError as e:
        raise PageError(f"{where}: front matter is not valid YAML: {e}") from e
    if not isinstance(meta, dict):
        raise PageError(f"{where}: front matter must be a mapping")
    return meta, text[end + 5:]


def is_question(src_uri: str) -> bool:
    parts = Path(src_uri).parts
    return len(parts) == 2 and parts[0] in VOCAB["topics"] and parts[1].endswith(".md")


def lang_of(src_uri: str) -> str:
    return "en" if src_uri.endswith(".en.md") else "zh"


def check_meta(meta: dict, lang: str, where: str) -> None:
    try:
        jsonschema.validate(meta, SCHEMA)
    except jsonschema.ValidationError as e:
        at = "/".join(map(str, e.absolute_path)) or "(top level)"
        raise PageError(f"{where}: front matter field {at}: {e.message}") from e
    tags = VOCAB["tags"] if lang == "zh" else {v: k for k, v in VOCAB["tags"].items()}
    diffs = VOCAB["difficulty"] if lang == "zh" else {v: k for k, v in VOCAB["difficulty"].items()}
    bad = [t for t in meta["tags"] if t not in tags]
    if bad:
        raise PageError(f"{where}: tags {bad} are not in the {lang} list of schemas/vocabulary.yml")
    if meta["difficulty"] not in diffs:
        raise PageError(f"{where}: difficulty {meta['difficulty']!r} is not one of {sorted(diffs)}")
    for lab in meta["labs"]:
        if not (ROOT / lab).is_file():
            raise PageError(f"{where}: lab {lab} does not exist")


def check_body(body: str, lang: str, where: str) -> None:
    want = [pair[0 if lang == "zh" else 1] for pair in VOCAB["sections"]]
    outside_code = _FENCE.sub("", body)
    got = [m.group(1).strip() for m in re.finditer(r"^## (.+)$", outside_code, re.M)]
    if got != want:
        raise PageError(f"{where}: sections must be {want} in this order; found {got}")
    lab_title = want[3]
    lab_section = outside_code.split(f"## {lab_title}", 1)[1].split("\n## ", 1)[0]
    if not any(m.name == "lab-cards" for m in markers.find(lab_section, where)):
        raise PageError(f"{where}: the '## {lab_title}' section needs the line {LAB_MARKER}")
    for m in _FENCE.finditer(body):
        lang_tag, code = m.group(2).lower(), m.group(3)
        if lang_tag in CODE_LANGS and any(ln.strip() and not ln.strip().startswith("--8<--")
                                          for ln in code.splitlines()):
            raise PageError(f"{where}: a ```{lang_tag} block holds code typed into the page; "
                            "include it from snippets/ with --8<-- so the tests run it")
    for m in re.finditer(r'^--8<-- "([^"]+)"', outside_code, re.M):  # a snippet outside a fence renders as prose
        if not m.group(1).split(":")[0].endswith(".md"):
            raise PageError(f"{where}: {m.group(0)} is not inside a code fence; wrap it in ```python or ```cuda")


def labs_importing() -> dict[str, list[str]]:
    """snippets module -> the labs (notebooks/NN-x.ipynb) that import it directly."""
    users: dict[str, list[str]] = {}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for mod in notebook_modules(nb):
            users.setdefault(mod, []).append(f"notebooks/{nb.name}")
    return users


def _module_of(include: str) -> str | None:
    path = include if include.startswith("snippets/") else f"snippets/{include}"
    if not path.endswith(".py") or path.startswith("snippets/common/"):
        return None  # not Python, or shared by every lab rather than the code of one
    return path[:-3].replace("/", ".").removesuffix(".__init__")


def check_uses(meta: dict, body: str, where: str) -> None:
    """Every lab the page quotes or whose code it includes is in `labs:`; name page, shortcode and lab."""
    listed = set(meta["labs"])
    for m in markers.find(body, where):
        if m.name == "metric" and m.lab not in listed:
            raise PageError(f"{where}:{m.line}: quotes <!-- metric {' '.join(m.args)} --> from {m.lab}, "
                            f"which its front matter `labs:` does not list")
    users = labs_importing()
    for inc in _INCLUDE.finditer(body):
        labs = users.get(_module_of(inc.group(1)) or "", [])
        if labs and not listed & set(labs):
            line = body.count("\n", 0, inc.start()) + 1
            raise PageError(f"{where}:{line}: includes {inc.group(1)}, code of {' or '.join(labs)}, "
                            f"which its front matter `labs:` does not list")


def check_quotes(body: str, where: str) -> None:
    """Every quoted metric comes from a verified result that has it. A stale or legacy one is shown flagged;
    freshness is the publishing gate's to refuse (kb/freshness.py), not the page contract's."""
    from kb.labs import LabError
    from kb.results import result_for

    for m in markers.find(body, where):
        if m.name != "metric":
            continue
        name, gpu = m.args[1], m.options.get("gpu")
        try:
            result = result_for(m.lab, gpu)
        except LabError as e:
            raise PageError(f"{where}:{m.line}: quotes {name} from a result that does not verify: {e}") from e
        if result is None:
            raise PageError(f"{where}:{m.line}: quotes {name}, but {m.lab} has no result for GPU "
                            f"{gpu or 'nvidia-h200 (the default)'}: run `make gpu-run`")
        if name not in result.data["metrics"]:
            raise PageError(f"{where}:{m.line}: {result.path.name} has no metric {name!r}")


SHORT_ANSWER_LIMIT = {"zh": 130, "en": 90}  # Chinese characters plus Latin words: what fits in 30 seconds


def check_short_answer(body: str, lang: str, where: str) -> None:
    head = VOCAB["sections"][0][0 if lang == "zh" else 1]
    section = body.split(f"\n## {head}", 1)[1].split("\n## ", 1)[0]
    length = prose.spoken_length(section)
    if length > SHORT_ANSWER_LIMIT[lang]:
        raise PageError(f"{where}: the '## {head}' section is a 30-second answer of at most "
                        f"{SHORT_ANSWER_LIMIT[lang]} {'characters and words' if lang == 'zh' else 'words'}; "
                        f"it has {length}: move the rest into the interview answer")


def check_prose(body: str, lang: str, where: str) -> None:
    references = VOCAB["sections"][-1][0 if lang == "zh" else 1]
    crowded = prose.crowded_lines(body, references)
    if crowded:
        raise PageError(f"{where}:{crowded[0]}: more than one sentence on a line; write one sentence per line "
                        f"(lines {', '.join(map(str, crowded[:8]))})")
    comparisons = prose.unquoted_comparisons(body, references)
    if comparisons:
        shown = "; ".join(f"line {n} ({kind}): {' '.join(s.split())[:80]!r}" for n, kind, s in comparisons[:3])
        raise PageError(f"{where}: {len(comparisons)} comparison(s) of measurements neither quoted nor cited ({shown}): "
                        "quote the lab's result with <!-- metric LAB NAME --> in the sentence or its paragraph, "
                        "or cite the source with [^id]")
    hits = prose.uncited(body, references)
    if hits:
        shown = "; ".join(f"line {n}: {num!r}" for n, num in hits[:5])
        raise PageError(f"{where}: {len(hits)} measured-looking number(s) typed into prose without a citation "
                        f"({shown}): quote a result with <!-- metric LAB NAME --> or cite the source with [^id]")


def twin_of(src_uri: str) -> str:
    return src_uri[:-6] + ".md" if src_uri.endswith(".en.md") else src_uri[:-3] + ".en.md"


def check_twins(zh: dict, en: dict, where: str) -> None:
    want_tags = [VOCAB["tags"][t] for t in zh["tags"]]
    if en["tags"] != want_tags:
        raise PageError(f"{where}: tags {en['tags']} should be {want_tags}, the translation of its Chinese twin")
    if en["difficulty"] != VOCAB["difficulty"][zh["difficulty"]]:
        raise PageError(f"{where}: difficulty {en['difficulty']!r} does not translate the Chinese twin's "
                        f"{zh['difficulty']!r}")
    for key in ("labs", "source"):
        if en.get(key) != zh.get(key):
            raise PageError(f"{where}: {key} differs from its Chinese twin ({en.get(key)!r} vs {zh.get(key)!r})")


def check_page(path: Path, docs: Path | None = None) -> dict:
    """Check one question page (and its twin's front matter); return its front matter."""
    docs = (docs or ROOT / "docs").resolve()
    src_uri = Path(path).resolve().relative_to(docs).as_posix()
    where = f"docs/{src_uri}"
    lang = lang_of(src_uri)
    text = Path(path).read_text(encoding="utf-8")
    meta, body = split_front_matter(text, where)
    body = "\n" * text[:len(text) - len(body)].count("\n") + body  # line numbers stay those of the file
    check_meta(meta, lang, where)
    try:
        markers.find(body, where)
    except markers.MarkerError as e:
        raise PageError(str(e)) from e
    check_body(body, lang, where)
    check_uses(meta, body, where)
    check_quotes(body, where)
    check_short_answer(body, lang, where)
    check_prose(body, lang, where)
    twin = docs / twin_of(src_uri)
    if not twin.is_file():
        raise PageError(f"{where}: its {'English' if lang == 'zh' else 'Chinese'} twin docs/{twin_of(src_uri)} is missing")
    twin_meta, _ = split_front_matter(twin.read_text(encoding="utf-8"), f"docs/{twin_of(src_uri)}")
    if lang == "en":
        check_twins(twin_meta, meta, where)
    return meta


def question_pages(docs: Path | None = None) -> list[Path]:
    docs = docs or ROOT / "docs"
    return sorted(p for p in docs.rglob("*.md") if is_question(p.relative_to(docs).as_posix()))
