"""hooks/search_worker_fix.py: the pinned Material worker is patched once, an unexpected worker fails the build,
and the names it fixes were in fact ambiguous."""
import types

import pytest
from mkdocs.exceptions import PluginError

from hooks import search_worker_fix as fix


def _site(tmp_path, text):
    workers = tmp_path / "assets/javascripts/workers"
    workers.mkdir(parents=True)
    (workers / "search.abc.min.js").write_text(text, encoding="utf-8")
    return types.SimpleNamespace(site_dir=str(tmp_path)), workers / "search.abc.min.js"


def test_the_worker_is_patched_once(tmp_path):
    config, path = _site(tmp_path, "a;" + fix.BUGGY + ";b")
    fix.on_post_build(config)
    fix.on_post_build(config)  # a second language build over the same assets
    assert path.read_text() == "a;" + fix.FIXED + ";b"


def test_an_unexpected_worker_fails_the_build(tmp_path):
    config, _ = _site(tmp_path, "no such expression")
    with pytest.raises(PluginError, match="not the expression this fix expects"):
        fix.on_post_build(config)


def test_the_old_names_collide_and_the_new_ones_do_not():
    def name(final, edges, sep):  # lunr's TokenSet.toString, with and without the fix
        return ("1" if final else "0") + "".join(label + str(child) + sep for label, child in sorted(edges.items()))

    a, b = {"1": 234}, {"1": 2, "3": 4}
    assert name(False, a, "") == name(False, b, "")
    assert name(False, a, "|") != name(False, b, "|")
