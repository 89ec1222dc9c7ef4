"""The site's string catalogues (kb/strings) and the snippet sections pasted into pages (kb/sections)."""
import string

import pytest

from kb import sections, strings


def _shape(node):
    if isinstance(node, dict):
        return {k: _shape(v) for k, v in node.items()}
    if isinstance(node, str):
        return sorted(f for _, f, _, _ in string.Formatter().parse(node) if f)
    return type(node).__name__


def test_both_catalogues_have_the_same_keys_and_placeholders():
    assert _shape(strings.catalogue("zh")) == _shape(strings.catalogue("en"))


def test_a_missing_key_or_value_names_the_catalogue():
    with pytest.raises(strings.StringsError, match=r"kb/strings/en.yml: no key 'nope'"):
        strings.t("en", "nope")
    with pytest.raises(strings.StringsError, match=r"kb/strings/zh.yml: 'needs_gpus' needs the value 'n'"):
        strings.t("zh", "needs_gpus", x=1)
    with pytest.raises(strings.StringsError, match="no string catalogue for language 'fr'"):
        strings.t("fr", "colab")


def test_nav_translations_cover_every_topic():
    pairs = strings.nav_translations()
    assert pairs["推理"] == "Inference" and pairs["实验"] == "Labs"


def test_every_snippet_section_is_included_and_short():
    assert sections.problems() == []


def test_section_problems_are_found(tmp_path):
    (tmp_path / "snippets/t").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    body = "\n".join(f"x{i} = {i}" for i in range(45))
    (tmp_path / "snippets/t/a.py").write_text(
        f"# --8<-- [start:long]\n{body}\n# --8<-- [end:long]\n# --8<-- [start:unused]\ny = 1\n# --8<-- [end:unused]\n"
        "# --8<-- [start:open]\n")
    (tmp_path / "docs/p.md").write_text('```python\n--8<-- "t/a.py:long"\n--8<-- "t/a.py:gone"\n```\n')
    with pytest.raises(ValueError, match=r"snippets/t/a.py: section\(s\) \['open'\] are never closed"):
        sections.problems(tmp_path)
    (tmp_path / "snippets/t/a.py").write_text((tmp_path / "snippets/t/a.py").read_text().replace(
        "# --8<-- [start:open]\n", ""))
    found = "\n".join(sections.problems(tmp_path))
    assert "section 'unused' is included on no page" in found
    assert "section 'long' has 45 lines, more than 40, and is pasted into docs/p.md" in found
    assert "docs/p.md: includes snippets/t/a.py:gone, which is not a section there" in found
