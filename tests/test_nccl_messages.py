"""The NCCL tools' message catalogues (snippets/nccl/messages/<lang>.yml): both languages have the same keys
and placeholders, every key the code asks for exists and every message is asked for, a missing key or
value names the catalogue file, and no language is chosen with `if lang == ...` in the code."""
import ast
import os
import re
import string
import subprocess
import sys
from pathlib import Path

import pytest

from snippets.nccl import doctor, messages, topo
from snippets.nccl.messages import MessageError, catalogue, msg, msgs


ROOT = Path(__file__).resolve().parents[1]
NCCL = ROOT / "snippets" / "nccl"
FIXTURES = ROOT / "tests" / "fixtures" / "nccl"


def placeholders(value) -> list[tuple]:
    """(field, conversion, format spec) of every {placeholder}, for a message or a list of them."""
    texts = [value] if isinstance(value, str) else value
    return sorted((f, c, s) for t in texts for _, f, s, c in string.Formatter().parse(t) if f is not None)


def test_catalogues_have_the_same_keys_and_placeholders():
    assert messages.languages() == ["en", "zh"]
    en, zh = catalogue("en"), catalogue("zh")
    assert sorted(en) == sorted(zh), f"only in en: {set(en) - set(zh)}, only in zh: {set(zh) - set(en)}"
    for key in en:
        assert type(en[key]) is type(zh[key]), key
        if isinstance(en[key], list):
            assert len(en[key]) == len(zh[key]), key
            for a, b in zip(en[key], zh[key]):
                assert placeholders(a) == placeholders(b), key  # each paragraph, not just the list
        assert placeholders(en[key]) == placeholders(zh[key]), key


def _calls_in_code():
    """(file, line, kind, key or key prefix, keyword names or None) of every message looked up in snippets/nccl.

    kind is 'msg' or 'msgs' for a literal key, 'prefix' for an f-string key (f"doctor.advice.{cls}"). A helper
    like `def m(key, **values): return msg(lang, f"nccl_info.{key}", **values)` counts as a prefix, and its
    calls with a literal argument as literal keys."""
    out = []
    for path in sorted(NCCL.glob("*.py")):
        if path.name == "messages.py":
            continue
        tree = ast.parse(path.read_text())
        wrappers = {}
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.args.args:
                for call in ast.walk(fn):
                    key = _key_arg(call)
                    if (isinstance(key, ast.JoinedStr) and len(key.values) == 2
                            and isinstance(key.values[1], ast.FormattedValue)
                            and isinstance(key.values[1].value, ast.Name)
                            and key.values[1].value.id == fn.args.args[0].arg):
                        wrappers[fn.name] = (key.values[0].value, call.func.id)
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
                continue
            kw = None if any(k.arg is None for k in call.keywords) else sorted(k.arg for k in call.keywords)
            where = f"{path.name}:{call.lineno}"
            if call.func.id in wrappers and call.args:
                prefix, kind = wrappers[call.func.id]
                assert isinstance(call.args[0], ast.Constant), f"{where}: {call.func.id}() needs a literal key"
                out.append((where, kind, prefix + call.args[0].value, kw))
            elif (key := _key_arg(call)) is not None:
                for k in (key.body, key.orelse) if isinstance(key, ast.IfExp) else (key,):
                    if isinstance(k, ast.Constant):
                        out.append((where, call.func.id, k.value, kw))
                    else:
                        assert isinstance(k, ast.JoinedStr) and isinstance(k.values[0], ast.Constant), \
                            f"{where}: a message key must be a literal or an f-string starting with one"
                        out.append((where, "prefix", k.values[0].value, None))
    return out


def _key_arg(call):
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in ("msg", "msgs"):
        assert len(call.args) == 2, f"line {call.lineno}: msg(lang, key, **values)"
        return call.args[1]
    return None


def test_every_key_in_the_code_exists_and_every_message_is_used():
    en = catalogue("en")
    calls = _calls_in_code()
    assert len(calls) > 50
    used = set()
    for where, kind, key, kw in calls:
        if kind == "prefix":
            hits = {k for k in en if k.startswith(key)}
            assert hits, f"{where}: no message starts with {key!r}"
            used |= hits
            continue
        assert key in en, f"{where}: no message {key!r} in messages/en.yml"
        assert isinstance(en[key], list) == (kind == "msgs"), f"{where}: {key} is read with {kind}()"
        if kw is not None:
            missing = {f for f, _, _ in placeholders(en[key])} - set(kw)
            assert not missing, f"{where}: {key} gets no value for {missing}"
        used.add(key)
    assert sorted(set(en) - used) == [], "messages no code asks for"


def test_dynamic_keys_exist():
    for cls in doctor.CLASSES:
        assert msg("zh", f"doctor.class.{cls}") and msgs("zh", f"doctor.advice.{cls}", culprits="1", op="x", seq=1,
                                                         late_s=1.0, detail="d")
    for code in topo.LEGEND_CODES:
        assert msg("zh", f"topo.legend.{code}") != msg("en", f"topo.legend.{code}")


def test_missing_key_placeholder_or_language_names_the_catalogue():
    with pytest.raises(MessageError, match=r"messages/en\.yml: no message 'doctor\.no_such_key'"):
        msg("en", "doctor.no_such_key")
    with pytest.raises(MessageError, match=r"messages/zh\.yml: doctor\.row: no value for placeholder \{dump\}"):
        msg("zh", "doctor.row", rank=1)
    with pytest.raises(MessageError, match=r"messages/fr\.yml: no message catalogue for language 'fr'"):
        msg("fr", "doctor.label.job")
    with pytest.raises(MessageError, match=r"messages/en\.yml: doctor\.advice\.none is a list"):
        msg("en", "doctor.advice.none")
    assert msg("zh-CN", "doctor.label.job") == "作业"


def test_a_catalogue_that_lacks_a_key_is_named(tmp_path, monkeypatch):
    text = (NCCL / "messages" / "en.yml").read_text()
    assert "    notes: Notes\n" in text
    (tmp_path / "xx.yml").write_text(text.replace("    notes: Notes\n", ""))
    (tmp_path / "yy.yml").write_text("doctor:\n  1: one\n")
    monkeypatch.setattr(messages, "DIR", tmp_path)
    messages.catalogue.cache_clear()
    try:
        (diag,) = doctor.diagnose_paths([str(FIXTURES / "probe" / "skip")], "xx", pytorch=False)
        diag.notes.append("a note")
        with pytest.raises(MessageError, match=re.escape(f"{tmp_path / 'xx.yml'}: no message 'doctor.label.notes'")):
            doctor.render(diag, "xx")
        with pytest.raises(MessageError, match=r"yy\.yml: key 'doctor\.1' is not a string"):
            msg("yy", "doctor.1")
    finally:
        messages.catalogue.cache_clear()


def test_no_language_is_chosen_in_the_code():
    for path in sorted(NCCL.glob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            assert not re.search(r"lang\s*[!=]=|lang\.startswith|[!=]= *\"(zh|en)\"|\bzh\b *(if|else)", line), \
                f"{path.name}:{i}: {line.strip()}"
            assert not re.search(r"[\u4e00-\u9fff]", line) or path.name == "messages.py", \
                f"{path.name}:{i}: Chinese text belongs in messages/zh.yml"


def test_catalogues_are_found_from_any_working_directory(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "snippets.nccl.doctor", str(FIXTURES / "probe" / "skip"), "--lang",
                        "zh", "--no-pytorch"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("作业: ") and "诊断: 缺席的 rank" in r.stdout
