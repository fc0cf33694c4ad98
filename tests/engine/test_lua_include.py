"""The ``--@include`` step of ``scripts.load`` and the shape it gives the scripts.

The expansion itself (inlining, once only, unknown names) is checked on small texts; the
real scripts are checked for what the step is for: each shared block is written once, in
lib.lua, a script includes only blocks it uses, names its KEYS as locals in the one order
of ``QueueKeys.script_keys``, and the expanded text (the one whose SHA is used) is what a
real Redis compiles and caches under that SHA.
"""

from __future__ import annotations

import hashlib
import re

import pytest

from django_delayq.engine import Engine, scripts
from django_delayq.engine.keys import GroupKeys, QueueKeys
from django_delayq.engine.scripts import IncludeError, expand, library

LIB = {"a": "A = 1\n", "b": "--@include a\nB = A\n", "c": "--@include b\n--@include a\nC = B\n"}
GROUP_SCRIPTS = ["acquire", "release_group"]
QUEUE_SCRIPTS = [n for n in scripts.SCRIPT_NAMES if n not in ("events_add", "mark", *GROUP_SCRIPTS)]
ORDER = [key.rsplit(":", 1)[1] for key in QueueKeys("p", "q").script_keys()]
LOCALS = re.compile(r"^local ([\w, ]+?) = (KEYS\[\d+\](?:,\s*KEYS\[\d+\])*)\n", re.MULTILINE)


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


def _check_keys(name: str, order: list[str]) -> None:
    code = _code(name)
    [(names, keys)] = LOCALS.findall(code)
    indexes = [int(i) for i in re.findall(r"KEYS\[(\d+)\]", keys)]
    named = [n.strip() for n in names.split(",")]
    assert named == [order[i - 1] for i in indexes], name
    assert code.count("KEYS[") == len(indexes), "%s.lua uses KEYS[i] below its top" % name
    header = dict(re.findall(r"^-- KEYS\[(\d+)\]\s+(\w+)", scripts._read(name), re.MULTILINE))
    assert {i: n for i, n in header.items() if int(i) in indexes} == {
        str(i): n for i, n in zip(indexes, named)}, name
    assert all(order[int(i) - 1] == n for i, n in header.items()), name


def test_scripts_name_their_keys_once_in_the_one_order() -> None:
    assert ORDER == ["pending", "inflight", "jobs", "attempts", "cancel", "dead", "epoch",
                     "ready", "prio", "paused", "limit", "starts", "urgent", "settled",
                     "settled_by", "runs"]
    extra = {"reenqueue": ["reconciled"], "claim": ["record"]}  # a key beyond the queue's
    for name in QUEUE_SCRIPTS:
        _check_keys(name, ORDER + extra.get(name, []))
    group = [key.rsplit(":", 1)[1] for key in GroupKeys("p", "g").script_keys()]
    assert group == ["grants", "running", "next_free"]
    for name in GROUP_SCRIPTS:
        _check_keys(name, group)
    assert LOCALS.findall(_code("events_add")) == [("events", "KEYS[1]")]
    assert LOCALS.findall(_code("mark")) == [("attempts, runs", "KEYS[1], KEYS[2]")]
