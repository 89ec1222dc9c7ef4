"""One search index per language (on_post_page, on_post_build).

mkdocs-static-i18n builds every language into one search/search_index.json, and Material's search
loads `<base>/search/search_index.json`, so the English site searched Chinese pages and each lab came
up twice. on_post_build (after i18n's, which writes the merged index) splits the index by location:
/<lang>/ entries go to <lang>/search/search_index.json with locations relative to /<lang>/, the rest
stay in search/search_index.json. on_post_page points a page's search base (Material's `__config`) at
its language's root, so its search loads that index and resolves result links against it.

Each entry also loses page chrome (prompts, pilcrows, "Copied!") and gains a `terms` field: other
spellings, abbreviations and typed Chinese words from kb.search_terms. The result list shows titles
and text only, so the reader never sees the field.
"""
import json
import re
import sys
from pathlib import Path

from mkdocs.plugins import event_priority

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kb.search_terms import abbreviation_terms, index_terms, mark_short_tokens, strip_chrome  # noqa: E402

_CONFIG = re.compile(r'(<script id="__config" type="application/json">)(.*?)(</script>)', re.S)
# `terms` counts like the text, `keys` (words of the title, abbreviations) like the title.
EXTRA_FIELDS = {"terms": {"boost": 1.0}, "keys": {"boost": 1000.0}}
# The site-wide pipeline keeps only the stop-word filter (lunr's stemmer and trimmer break Chinese words);
# without the trimmer, English tokens keep their punctuation ("from," "memory?"), which a prefix search for
# an abbreviation such as FR then matches. The English index has no Chinese words to protect.
ENGLISH_PIPELINE = ["trimmer", "stopWordFilter"]


def _locales(config) -> list[str]:
    """The languages built under /<locale>/ (all but the default)."""
    i18n = config.plugins.get("i18n")
    return [] if i18n is None else [lang.locale for lang in i18n.config.languages
                                    if not lang.default and lang.build]


def on_post_page(output, page, config):
    locale = next((loc for loc in _locales(config) if page.file.dest_uri.startswith(f"{loc}/")), None)
    if locale is None:
        return output

    def rebase(m):
        app = json.loads(m.group(2))
        app["base"] = f"{app['base'].rstrip('/')}/{locale}/"
        return m.group(1) + json.dumps(app) + m.group(3)
    return _CONFIG.sub(rebase, output, count=1)


def _entry(doc: dict) -> dict:
    title, text = strip_chrome(doc["title"]), strip_chrome(doc["text"])
    plain_title, plain_text = title.replace("\u200b", ""), text.replace("\u200b", "")
    extra = {"terms": index_terms(plain_text),
             "keys": index_terms(plain_title) + abbreviation_terms(plain_title + "\n" + plain_text)}
    fields = {"title": title, "text": text} | {field: " ".join(ws) for field, ws in extra.items() if ws}
    return doc | {field: mark_short_tokens(value) for field, value in fields.items()}


@event_priority(-200)  # after mkdocs-static-i18n (-100) has built every language and merged the index
def on_post_build(config):
    i18n = config.plugins.get("i18n")
    if i18n is not None and getattr(i18n, "building", False):
        return  # a language's inner build; the outer build's call splits the merged index
    site = Path(config.site_dir)
    path = site / "search/search_index.json"
    if not path.is_file():
        return
    index = json.loads(path.read_text(encoding="utf-8"))
    fields = index["config"]["fields"] | EXTRA_FIELDS
    prefixes = [f"{loc}/" for loc in _locales(config)]
    split = {"": []} | {p: [] for p in prefixes}
    for doc in index["docs"]:
        prefix = next((p for p in prefixes if doc["location"].startswith(p)), "")
        split[prefix].append(_entry(dict(doc, location=doc["location"][len(prefix):])))
    for prefix, docs in split.items():
        seen, unique = set(), []
        for doc in docs:  # i18n merges the index once per language build: keep each location once
            if doc["location"] not in seen:
                seen.add(doc["location"])
                unique.append(doc)
        out = site / prefix / "search/search_index.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        config_ = dict(index["config"], fields=fields)
        if prefix:  # a language other than the default: trim punctuation off English tokens
            config_["pipeline"] = ENGLISH_PIPELINE
        data = {"config": config_, "docs": unique}
        out.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
