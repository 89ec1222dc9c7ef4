"""Make Material's search worker answer queries that contain digits (on_post_build).

lunr's TokenSet names a trie node by its final flag followed by each edge's label and child id, with
nothing between them: with digit labels two different nodes can get the same name ("1" -> 234 and
"1" -> 2, "3" -> 4 both read "01234"), minimisation then merges them, the token set returns words the
index does not hold, and every query with a digit fails inside the worker ("Cannot read properties of
undefined (reading '_index')"; "zero stage 3" found nothing). Ending each id with "|" makes the names
unambiguous: a label is one character and an id only digits. The pinned Material's worker must contain
the expression exactly once, or the build fails, so an upgrade cannot drop the fix silently.
"""
from pathlib import Path

from mkdocs.exceptions import PluginError

BUGGY = "e=e+s+o.id}return e}"
FIXED = 'e=e+s+o.id+"|"}return e}'


def on_post_build(config):
    workers = sorted(Path(config.site_dir).rglob("assets/javascripts/workers/search.*.min.js"))
    if not workers:
        raise PluginError(f"no search worker under {config.site_dir}/assets/javascripts/workers")
    for path in workers:
        text = path.read_text(encoding="utf-8")
        if text.count(FIXED) == 1:
            continue  # this build's assets were already patched (i18n builds share them)
        if text.count(BUGGY) != 1:
            raise PluginError(f"{path}: lunr's TokenSet.toString is not the expression this fix expects "
                              f"({text.count(BUGGY)} matches); check the fix against the new Material")
        path.write_text(text.replace(BUGGY, FIXED), encoding="utf-8")
