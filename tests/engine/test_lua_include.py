"""The ``--@include`` step of ``scripts.load`` and the shape it gives the scripts.

The expansion itself (inlining, once only, unknown names) is checked on small texts; the
real scripts are checked for what the step is for: each shared block is written once, in
lib.lua, a script includes only blocks it uses, declares the keys it and its blocks use
on its one ``-- KEYS:`` line, by name only (made locals by ``scripts.load``, their types
checked from ``keys.kinds()``), and the expanded text (the one whose SHA is used) is what
a real Redis compiles and caches under that SHA.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from django_delayq.engine import Engine, keys, scripts
from django_delayq.engine.keys import CallableLimitKeys, GlobalKeys, QueueKeys
from django_delayq.engine.scripts import IncludeError, expand, library

LIB = {"a": "A = 1\n", "b": "--@include a\nB = A\n", "c": "--@include b\n--@include a\nC = B\n"}


def _code(name: str) -> str:
    """A script's own text without its comment lines."""
    return "".join(line for line in scripts._read(name).splitlines(keepends=True)
                   if not line.lstrip().startswith("--") or line.startswith("--@"))


def _defined(block: str) -> set[str]:
    """Names a block declares at its top level (``local function f``, ``local A, B =``)."""
    names = set(re.findall(r"^local function (\w+)", block, re.MULTILINE))
    for group in re.findall(r"^local ([\w, ]+) =", block, re.MULTILINE):
        names.update(n.strip() for n in group.split(","))
    return names


# -- the include step ---------------------------------------------------------------------


def test_an_include_line_is_replaced_by_its_block() -> None:
    assert expand("s.lua", "x = 0\n--@include a\ny = A\n", LIB) == "x = 0\nA = 1\ny = A\n"


def test_a_block_brings_the_blocks_it_includes_first() -> None:
    assert expand("s.lua", "--@include b\n", LIB) == "A = 1\nB = A\n"


def test_a_block_is_inlined_once_however_often_it_is_asked_for() -> None:
    text = expand("s.lua", "--@include c\n--@include a\n--@include b\n--@include c\nz\n", LIB)
    assert text == "A = 1\nB = A\nC = B\nz\n"


def test_an_unknown_include_is_an_error_naming_the_script_and_the_include() -> None:
    with pytest.raises(IncludeError, match=r"claim\.lua: --@include nowish: .*no block"):
        expand("claim.lua", "--@include a\n--@include nowish\n", LIB)


def test_an_unknown_include_inside_a_block_names_the_script_too() -> None:
    with pytest.raises(IncludeError, match=r"ack\.lua: --@include missing"):
        expand("ack.lua", "--@include x\n", {"x": "--@include missing\n"})


@pytest.mark.parametrize("line", ["--@inclde a", "--@include", "--@include a b",
                                  "--@define a"])
def test_a_malformed_or_misplaced_directive_is_an_error(line: str) -> None:
    with pytest.raises(IncludeError, match="s.lua"):
        expand("s.lua", line + "\n", LIB)


def test_the_library_is_cut_into_its_defined_blocks() -> None:
    text = "-- about\nlocal not_sent = 1\n--@define a\nA = 1\n\n--@define b\n--@include a\nB = 2"
    assert library(text) == {"a": "A = 1\n", "b": "--@include a\nB = 2\n"}
    with pytest.raises(IncludeError, match="'a' defined twice"):
        library("--@define a\n--@define a\n")


# -- the scripts as loaded ----------------------------------------------------------------


def test_the_sha_is_of_the_expanded_source_and_redis_agrees(engine: Engine) -> None:
    blocks = scripts._library()
    for name in scripts.SCRIPT_NAMES:
        script = scripts.load(name)
        assert script.sha == hashlib.sha1(script.source.encode()).hexdigest()
        assert "--@" not in script.source, name
        for block in blocks.values():
            assert script.source.count(block) <= 1, name
        assert engine.client.script_load(script.source) in (script.sha, script.sha.encode())
        assert engine.client.script_exists(script.sha) == [True]


def test_each_shared_block_is_written_only_in_the_library() -> None:
    everything = {name: scripts._read(name) for name in scripts.SCRIPT_NAMES}
    for text in ("redis.call('TIME')", "replicate_commands", "tonumber(t[2]) / 1000",
                 "0, 0, 'WITHSCORES'", "line.first == nil", "'HDEL', jobs", "'SREM', cancel",
                 "'HDEL', prio", "(100 - priority) * LEVEL"):
        assert text in scripts._read("lib"), text
        assert [n for n, source in everything.items() if text in source] == [], text
    for name, block in scripts._library().items():
        lines = {line.strip() for line in block.splitlines()
                 if len(line.strip()) >= 24 and not line.strip().startswith("--")}
        for script, source in everything.items():
            assert not [line for line in lines if line in source], (name, script)


def test_a_script_includes_only_blocks_it_uses() -> None:
    blocks = scripts._library()
    for name in scripts.SCRIPT_NAMES:
        code = _code(name)
        for wanted in re.findall(r"^--@include (\w+)$", code, re.MULTILINE):
            used = [n for n in _defined(blocks[wanted]) if re.search(r"\b%s\b" % n, code)]
            assert used, "%s.lua includes %s but uses none of %s" % (
                name, wanted, sorted(_defined(blocks[wanted])))


KNOWN = {name for name in dir(QueueKeys("p", "q")) + dir(CallableLimitKeys("p", "g"))
         if not name.startswith("_")}
EXTRA = {"claim": {"record"}, "nack": {"nacked"}, "events_add": {"events"}}  # keys a caller passes by name


def _identifiers(code: str) -> set[str]:
    """Names in Lua ``code`` outside its strings and comments (not after a dot)."""
    code = re.sub(r"--[^\n]*", "", code)
    code = re.sub(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"", "''", code)
    return set(re.findall(r"(?<![.\w])([A-Za-z_]\w*)", code))


def _block_keys(name: str) -> set[str]:
    """The keys a lib.lua block (with the blocks it includes) uses by name: the
    including script must declare them (they are its locals)."""
    text = expand("lib.lua", "--@include %s\n" % name, scripts._library())
    params = {p for group in re.findall(r"function \w*\(([^)]*)\)", text)
              for p in re.split(r"[,\s]+", group)}
    return (_identifiers(text) & KNOWN) - _defined(text) - params


def test_every_script_declares_the_keys_it_and_its_blocks_use() -> None:
    for name in scripts.SCRIPT_NAMES:
        declared = [key.name for key in scripts.declared_keys(scripts._read(name), name)]
        assert len(set(declared)) == len(declared), name
        assert set(declared) <= KNOWN | EXTRA.get(name, set()), name
        assert set(declared) & set(keys.BY_NAME) <= EXTRA.get(name, set()), name
        code = _code(name)
        assert "KEYS[" not in code, "%s.lua reads KEYS[i]: declare the key instead" % name
        wanted = set().union(*[_block_keys(b) for b in
                               re.findall(r"^--@include (\w+)$", code, re.MULTILINE)])
        missing = wanted - set(declared)
        assert not missing, "%s.lua includes blocks using %s" % (name, sorted(missing))
        unused = set(declared) - _identifiers(code) - wanted
        assert not unused, "%s.lua declares %s and never uses it" % (name, sorted(unused))


def test_the_blocks_read_no_keys_by_position() -> None:
    for name, block in scripts._library().items():
        positions = re.findall(r"KEYS\[(\w+)\]", re.sub(r"--[^\n]*", "", block))
        assert positions in ([], ["i"]), name  # wrong_type checks KEYS[i] of kinds[i]


def test_a_call_passes_the_declared_keys_in_their_order() -> None:
    k = QueueKeys("p", "q")
    ack = scripts.load("ack")
    assert ack.keys_of(k) == tuple(getattr(k, key.name) for key in ack.keys)
    assert ack.source.splitlines()[1].startswith(
        "local %s = KEYS[1], " % ", ".join(key.name for key in ack.keys))
    claim = scripts.load("claim")
    assert claim.keys_of(k)[-1] == k.group_held  # the optional record left out
    assert claim.keys_of(k, record="r")[-1] == "r"
    assert scripts.keys_of("mark", k) == (k.attempts, k.runs, k.inflight)
    with pytest.raises(TypeError, match="grants"):
        scripts.keys_of("acquire", k)


def test_each_header_declares_its_keys_on_one_line_by_name_only() -> None:
    for name in scripts.SCRIPT_NAMES:
        lines = [line for line in scripts._read(name).splitlines() if "KEYS:" in line]
        assert len(lines) == 1, "%s.lua: %d lines declare keys" % (name, len(lines))
        assert re.fullmatch(r"-- KEYS:( [a-z_]+\??)+", lines[0]), lines[0]


def test_every_key_has_its_type_once_in_keys_py() -> None:
    kinds = keys.kinds()
    declared = {name for cls in (QueueKeys, CallableLimitKeys, GlobalKeys)
                for name, k in vars(cls).items() if isinstance(k, keys.Key)}
    for cls in (QueueKeys, CallableLimitKeys, GlobalKeys):
        for name, key in vars(cls).items():
            if isinstance(key, keys.Key):
                assert key.kind in (*keys.TYPES, keys.ANY), name
                assert kinds.get(name, key.kind) == key.kind, name  # one name, one type
    assert set(kinds) - declared == set(keys.BY_NAME)
    assert set(keys.BY_NAME.values()) <= set(keys.TYPES)
    for name in scripts.SCRIPT_NAMES:  # each script checks exactly what the table says
        for key in scripts.load(name).keys:
            assert key.kind == ("" if kinds[key.name] == keys.ANY else kinds[key.name]), name


def test_a_key_checked_in_one_script_is_checked_in_every_script() -> None:
    checked: dict[str, set[str]] = {}
    for name in scripts.SCRIPT_NAMES:
        for key in scripts.load(name).keys:
            checked.setdefault(key.name, set()).add(key.kind)
    assert {n: k for n, k in checked.items() if len(k) > 1} == {}
    assert {n for n, k in checked.items() if k == {""}} == {"paused"}  # keys.ANY


@pytest.mark.parametrize(("header", "message"), [
    ("-- no keys\n", "no -- KEYS"),
    ("-- KEYS: pending\n-- KEYS: ready\n", "one -- KEYS: line"),
    ("-- KEYS: pending nowhere\n", "unknown key 'nowhere'"),
    ("-- KEYS: pending:zset\n", "'pending:zset'.* type"),
    ("-- KEYS: Pending\n", "malformed"),
    ("-- KEYS: record? pending\n", "only the last")])
def test_a_bad_declaration_is_an_error_naming_the_script(header: str, message: str) -> None:
    with pytest.raises(IncludeError, match="s.lua: .*" + message):
        scripts.declared_keys(header, "s.lua")


def test_the_types_are_checked_after_the_includes_before_the_code() -> None:
    text, declared = scripts.with_prelude("s", "-- KEYS: pending paused record?\n"
                                               "--@include now\nx()\n")
    assert [(k.name, k.kind, k.optional) for k in declared] == [
        ("pending", "zset", False), ("paused", "", False), ("record", "string", True)]
    assert text == ("local pending, paused, record = KEYS[1], KEYS[2], KEYS[3]\n"
                    "-- KEYS: pending paused record?\n--@include now\n--@include wrong_type\n"
                    "do local err = wrong_type({'zset', '', (KEYS[3] and 'string' or ''), "
                    "order = '\\001\\003\\002'}) "
                    "if err then return err end end\nx()\n")
