"""Loads ``django_delayq/lua/*.lua`` once and runs them by SHA (EVALSHA).

**Shared blocks.** ``lua/lib.lua`` holds the code the scripts share (the clock, the
type checks, "wake the workers if this is the new earliest due time", forgetting a job
that is final, ...) in named blocks, each opened by a ``--@define <name>`` line. A
script asks for a block with a ``--@include <name>`` line; ``expand`` replaces that line
with the block (its own includes filled the same way), inlines each block at most once
per script, and refuses a name lib.lua does not define (``IncludeError``, naming the
script and the include). The expanded text is what is sent and what the SHA is of.

**Keys.** A script declares the keys it uses on one header line, ``-- KEYS: inflight
jobs ... record?``, in the order of its ``KEYS``: each a name of the caller's keys object
(``QueueKeys``, ``CallableLimitKeys``) or of ``keys.BY_NAME``, names only (``?`` after a
last key a caller may leave out). A key's Redis type, and what it holds, are the key's
own, written once in ``engine/keys.py`` (``keys.kinds()``); ``declared_keys`` refuses a
second ``-- KEYS:`` line, an unknown name and a type in the header (``IncludeError``).
``load`` makes those names locals at the top of the script (``local inflight, runs =
KEYS[1], KEYS[2]``, before the lib.lua blocks, which use the same names) and checks
their types after the script's includes (``wrong_type``); ``Script.keys_of`` builds a
call's ``KEYS`` from the same declaration (``tests/engine/test_lua_include.py`` compares
each declaration with what the script and its blocks use). A server that lost its script
cache (restart, SCRIPT FLUSH, a new cluster node) answers NOSCRIPT; the script is then
sent with EVAL once, which also caches it.

**Bounds.** Every script does a bounded amount of work per call, so none holds Redis
for more than a few milliseconds whatever the backlog (a script blocks every other
client while it runs). The bound is the ``Cost:`` line of the script's header and a
constant here; ``Script`` refuses a call that goes beyond it, and the callers (the
``Engine`` methods, the event stream, the reconciler) split their lists into chunks of
at most that size. The sizes keep a call near 1 ms Redis-side on a small
machine with a 100,000-job backlog (``tests/engine/test_script_bounds.py`` checks
the SLOWLOG), while keeping enough jobs per round trip for throughput.

**Keys of the wrong type.** A script checks the type of every key it uses before its
first write and ends with ``DELAYQ-WRONGTYPE <i> <found> <expected>`` when ``KEYS[i]``
is wrong (a key overwritten by hand or by another program). ``Script`` then renames
that key to ``<key>:damaged:<ms>`` (same hash tag, so the same cluster slot), logs a
WARNING, and runs the script again: the queue keeps working, and nothing is deleted.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

logger = logging.getLogger(__name__)

# Most items per call of each script (the ``Cost:`` line of its header says the same).
MAX_ENQUEUE = 200  # jobs
# Jobs leased per call (claim.lua caps its ``limit`` at this, its MAX_CLAIM; a larger
# CLAIM_BATCH claims in calls of this many). With MAX_PROMOTE promoted too, a claim under
# a 100,000-job due backlog takes ~3 ms median on an idle 2-core machine (200 and 250:
# ~9 ms; 100 and 100: ~3.3 ms, a third of the drain's claims still over the 5 ms bound
# in tests/engine/test_script_bounds.py). ``python bench/claim_cost.py`` measures it.
MAX_CLAIM = 50
# Due jobs claim.lua promotes from pending to ready per call (its PROMOTE), in due order,
# and due jobs of priority above 0 it promotes ahead of them from the urgent index (its
# URGENT): such a job is promoted by the first claim after it is due when at most
# MAX_URGENT of them are due before it; one of priority 0 or below, with n jobs of pending
# due before it, waits at most ceil(n / MAX_PROMOTE) claims. MAX_PROMOTE keeps pace with
# MAX_CLAIM: below it, a claim on a backlog in pending would lease fewer than asked.
MAX_PROMOTE = 50
MAX_URGENT = 50
# Jobs claim.lua leases per call in a grouped queue (its TURNS: docs/groups.md): a turn
# costs an index read per group and per job a few more writes than the plain path: 25
# (with its 25 + 25 promoted) keep a grouped claim within the 5 ms bound with 10,000
# limited groups, p99 ~4.5 ms on an idle 2-core machine (bench/groups_claim.py,
# tests/engine/test_groups_bounds.py; docs/performance.md).
MAX_TURNS = 25
# Due jobs a grouped claim promotes from pending, and as many from the urgent index (its
# GROUP_PROMOTE, each one indexed by group too): with MAX_PROMOTE and MAX_URGENT (50 and
# 50) claims over 10,000 limited groups went over the 5 ms bound too often on an idle
# 2-core machine (docs/performance.md, "Claim cost under a due backlog").
MAX_GROUP_PROMOTE = 25
MAX_ACK = 250  # (id, token, code) triples
MAX_FORGET = 250  # ids whose settled records go (forget_settled.lua), plus 100 old ones
MAX_NACK = 200  # (id, token, delay) triples
MAX_EXTEND = 250  # (id, token) pairs
MAX_MARK = 100  # (id, token, offset) triples
MAX_GIVE_BACK = 200  # (id, token, due) triples (release, defer)
MAX_PURGE = 200  # waiting jobs removed (purge.lua caps its ``limit`` at this)
MAX_RELEASE_CALLABLE = 250  # job ids whose callable-limit slot is freed
MAX_RECOVER = 100  # expired leases (recover.lua caps its ``limit``), and max_attempts pairs
# events_add: 100 events a call took 5-7 ms in some 20,000-job drains (an event carries
# up to ~15 fields and a 500-character error); 25 keep a call near 1 ms
MAX_EVENTS = 25  # events
MAX_EVENT_ARGS = 800  # arguments of events_add (a count and the field/value pairs)
# Rows per MULTI of the reconciler (reconcile.py): each row costs ten reads (outbox.py's
# presence; when re-enqueued, its share of a reenqueue.lua call). At most MAX_ENQUEUE.
# 100 rows stay under 1 ms at a 100,000-job backlog (~4 us a row, 0.4 ms a MULTI in INFO
# commandstats); 200 took up to 4 ms, 500 10 ms (latency monitor, at fewer reads a row).
RECONCILE_CHUNK = 100
MAX_REENQUEUE = RECONCILE_CHUNK  # jobs per reenqueue.lua call (the reconciler's chunk)


@dataclass(frozen=True, slots=True)
class Bound:
    """``fixed`` leading ARGV, then at most ``items`` groups of ``per_item`` ARGV. Items
    that vary in size (``args``: the most ARGV in all) are each a count n and n pairs
    (events_add's events): ``items`` then bounds the number counted (``items_in``)."""

    fixed: int
    per_item: int
    items: int
    args: int = 0

    @property
    def max_args(self) -> int:
        return self.args or self.fixed + self.per_item * self.items

    def items_in(self, args: list[Any]) -> int:
        """The items of ``args`` (items that vary in size), counted as the script reads
        them: up to the first that is not a whole count of pairs all given."""
        count, i = 0, self.fixed
        while i < len(args):
            try:
                n = int(args[i])
            except (TypeError, ValueError):
                break
            if n < 1 or i + 2 * n >= len(args):
                break
            count, i = count + 1, i + 1 + 2 * n
        return count


BOUNDS: dict[str, Bound] = {
    "enqueue": Bound(2, 6, MAX_ENQUEUE),
    "claim": Bound(4, 0, 0),
    "mark": Bound(0, 3, MAX_MARK),
    "ack": Bound(3, 3, MAX_ACK),
    "nack": Bound(4, 3, MAX_NACK),
    "extend": Bound(2, 2, MAX_EXTEND),
    "recover": Bound(6, 2, MAX_RECOVER),
    "cancel": Bound(2, 0, 0),
    "move": Bound(6, 0, 0),
    "give_back": Bound(3, 4, MAX_GIVE_BACK),
    "stats": Bound(1, 0, 0),
    "inspect": Bound(1, 0, 0),
    "events_add": Bound(1, 0, MAX_EVENTS, args=MAX_EVENT_ARGS),
    "purge": Bound(1, 0, 0),
    "acquire": Bound(9, 0, 0),
    "release_callable": Bound(0, 1, MAX_RELEASE_CALLABLE),
    "forget_settled": Bound(2, 1, MAX_FORGET),
    "reenqueue": Bound(5, 5, MAX_REENQUEUE),
    "group_control": Bound(4, 0, 0),
}

SCRIPT_NAMES = tuple(BOUNDS)  # every script of lua/ (lib.lua is not one)

_WRONG_TYPE = re.compile(r"DELAYQ-WRONGTYPE (\d+) (\S+) (\S+)")


class TooManyArguments(ValueError):
    """A call beyond a script's bound: the caller must split its list."""


@dataclass(frozen=True, slots=True)
class Key:
    """One key a script declares (``-- KEYS:``): its ``name`` on the caller's keys object,
    the Redis ``kind`` checked before the script's first write (``keys.kinds()``; '' = not
    checked: ``keys.ANY``), and whether a caller may leave it out (``optional``: the last
    ones only)."""

    name: str
    kind: str = ""
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str
    bound: Bound
    keys: tuple[Key, ...] = ()

    def keys_of(self, names: Any, **extra: str | None) -> tuple[str, ...]:
        """This script's ``KEYS``: each declared key from ``extra`` if given there, else
        the attribute of that name of ``names`` (a ``QueueKeys``, ``CallableLimitKeys``); an
        optional key given as None (or not at all) is left out with those after it."""
        out: list[str] = []
        for key in self.keys:
            value = extra[key.name] if key.name in extra else getattr(names, key.name, None)
            if value is None:
                if key.optional:
                    break
                raise TypeError("%s.lua needs key %r" % (self.name, key.name))
            out.append(value)
        return tuple(out)

    def check(self, args: list[Any]) -> None:
        if len(args) > self.bound.max_args:
            raise TooManyArguments(
                "%s.lua takes at most %d arguments per call (%d given): split the batch"
                % (self.name, self.bound.max_args, len(args)))
        if self.bound.args and (n := self.bound.items_in(args)) > self.bound.items:
            raise TooManyArguments(
                "%s.lua takes at most %d events per call (%d given): split the batch"
                % (self.name, self.bound.items, n))

    def __call__(self, client: Any, keys: tuple[str, ...], args: list[Any]) -> Any:
        self.check(args)
        for _ in range(len(keys) + 1):
            try:
                return self._eval(client, keys, args)
            except ResponseError as exc:
                damaged = _wrong_type(exc, keys)
                if damaged is None:
                    raise
                move_aside(client, *damaged)
        return self._eval(client, keys, args)

    def _eval(self, client: Any, keys: tuple[str, ...], args: list[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)


def _wrong_type(exc: ResponseError, keys: tuple[str, ...]) -> tuple[str, str, str] | None:
    """(key, found type, expected type) of a DELAYQ-WRONGTYPE error, else None."""
    match = _WRONG_TYPE.search(str(exc))
    if match is None or not 1 <= int(match.group(1)) <= len(keys):
        return None
    return keys[int(match.group(1)) - 1], match.group(2), match.group(3)


def move_aside(client: Any, key: str, found: str, expected: str) -> None:
    """Rename ``key`` (a ``found`` where a ``expected`` belongs) out of the queue's way."""
    target = "%s:damaged:%d" % (key, time.time() * 1000)
    try:
        client.rename(key, target)
    except ResponseError:  # another worker moved it first
        return
    logger.warning("Redis key %r is a %s, not a %s: moved aside to %r (the queue goes on "
                   "without it; inspect or delete it)", key, found, expected, target)


class IncludeError(ValueError):
    """A script includes a block lib.lua does not define, or a ``--@`` line is malformed."""


_DIRECTIVE = re.compile(r"--@(define|include)[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*\n?")


def _directive(line: str, where: str) -> tuple[str, str] | None:
    """(``define`` or ``include``, name) of a ``--@`` line, None for any other line."""
    if not line.startswith("--@"):
        return None
    match = _DIRECTIVE.fullmatch(line)
    if match is None:
        raise IncludeError("%s: malformed directive %r (expected --@include <name>)"
                           % (where, line.rstrip("\n")))
    return match.group(1), match.group(2)


def library(text: str, where: str = "lib.lua") -> dict[str, str]:
    """The blocks of ``text``: name -> its lines after ``--@define name`` up to the next
    ``--@define`` (the text before the first one is left out)."""
    blocks: dict[str, str] = {}
    name = None
    for line in text.splitlines(keepends=True):
        found = _directive(line, where)
        if found is not None and found[0] == "define":
            if found[1] in blocks:
                raise IncludeError("%s: block %r defined twice" % (where, found[1]))
            name, blocks[found[1]] = found[1], ""
        elif name is not None:
            blocks[name] += line
    return {name: block.rstrip("\n") + "\n" for name, block in blocks.items()}


def expand(script: str, source: str, blocks: dict[str, str], done: set[str] | None = None
           ) -> str:
    """``source`` (of ``script``, for messages) with each ``--@include name`` line replaced
    by ``blocks[name]``, itself expanded; a block in ``done`` (inlined already) is not
    inlined again."""
    done = set() if done is None else done
    out: list[str] = []
    for line in source.splitlines(keepends=True):
        found = _directive(line, script)
        if found is None:
            out.append(line)
        elif found[0] != "include" or found[1] not in blocks:
            raise IncludeError("%s: --@%s %s: lib.lua defines no block %r (it has: %s)" % (
                script, *found, found[1], ", ".join(sorted(blocks))))
        elif found[1] not in done:
            done.add(found[1])
            out.append(expand(script, blocks[found[1]], blocks, done))
    return "".join(out)


_KEYS_LINE = re.compile(r"^-- KEYS:(.*)$", re.MULTILINE)
_KEY = re.compile(r"([a-z_][a-z0-9_]*)(\?)?")


def declared_keys(source: str, where: str) -> tuple[Key, ...]:
    """The keys ``source`` declares on its one ``-- KEYS:`` line, in order, each with its
    type from ``keys.kinds()``."""
    from django_delayq.engine import keys  # lazy: at module level, 13 modules in a chain
    lines = _KEYS_LINE.findall(source)
    if len(lines) != 1:
        raise IncludeError("%s: %s -- KEYS: line (one line names every key)"
                           % (where, "no" if not lines else "more than one"))
    kinds, found = keys.kinds(), []
    for item in lines[0].split():
        match = _KEY.fullmatch(item)
        if match is None:
            raise IncludeError("%s: %r in its -- KEYS: line: a key name (name? when optional)"
                               "%s" % (where, item, "; its type is keys.py's, not the header's"
                                       if ":" in item else ", malformed"))
        if match.group(1) not in kinds:
            raise IncludeError("%s: unknown key %r in its -- KEYS: line (engine/keys.py names "
                               "no such key)" % (where, match.group(1)))
        kind = kinds[match.group(1)]
        found.append(Key(match.group(1), "" if kind == keys.ANY else kind,
                         bool(match.group(2))))
    if not found:
        raise IncludeError("%s: no key on its -- KEYS: line" % where)
    if any(k.optional and not later.optional
           for i, k in enumerate(found) for later in found[i + 1:]):
        raise IncludeError("%s: only the last keys may be optional" % where)
    return tuple(found)


# The keys a busy queue always has, which ``wrong_type`` types first: once it has met as
# many existing keys as its one EXISTS counted, the others are absent and not typed.
LIKELY_KEYS = ("ready", "inflight", "attempts", "pending", "settled", "settled_by", "record",
               "nacked", "runs", "epoch", "reconciled", "dead", "events")


def check_order(keys: Sequence[Key]) -> list[int]:
    """The 1-based indices of ``keys`` in the order ``wrong_type`` checks them: those of
    ``LIKELY_KEYS`` first (in that order), then the others as declared."""
    rank = {name: i for i, name in enumerate(LIKELY_KEYS)}
    return sorted(range(1, len(keys) + 1),
                  key=lambda i: (rank.get(keys[i - 1].name, len(rank)), i))


def prelude(keys: Sequence[Key], own_check: bool = False) -> tuple[str, str]:
    """(the line making the declared keys locals, the lines checking their types; with
    ``own_check``, the line naming them ``KINDS`` for the script's own ``wrong_type``).
    The kinds table carries ``order`` (``check_order``, a byte per index)."""
    local = "local %s = %s\n" % (", ".join(k.name for k in keys),
                                 ", ".join("KEYS[%d]" % i for i in range(1, len(keys) + 1)))
    if not any(k.kind for k in keys):
        return local, ""
    kinds = ", ".join(("(KEYS[%d] and '%s' or '')" % (i, k.kind)) if k.optional and k.kind
                      else "'%s'" % k.kind for i, k in enumerate(keys, 1))
    kinds += ", order = '%s'" % "".join("\\%03d" % i for i in check_order(keys))
    if own_check:
        return local, "--@include wrong_type\nlocal KINDS = {%s}\n" % kinds
    return local, ("--@include wrong_type\n"
                   "do local err = wrong_type({%s}) if err then return err end end\n" % kinds)


def with_prelude(name: str, raw: str) -> tuple[str, tuple[Key, ...]]:
    """``raw`` (a script's text) with its keys made locals at the top and their types
    checked after its last top-level include (or its header), and the keys. A script that
    checks ``KINDS`` itself (``wrong_type(KINDS)``, ``read_failed(KINDS, err)``: enqueue.lua
    and ack.lua, only when a read cannot tell; mark.lua, only when a command failed) gets
    ``KINDS`` instead of the check; it must still check before its first write, or write
    with one command whose failure it answers so."""
    keys = declared_keys(raw, name + ".lua")
    local, check = prelude(keys, own_check="(KINDS" in raw)
    lines = raw.splitlines(keepends=True)
    includes = [i for i, line in enumerate(lines) if line.startswith("--@include")]
    at = includes[-1] + 1 if includes else next(
        (i for i, line in enumerate(lines) if not line.startswith("--")), len(lines))
    return local + "".join(lines[:at]) + check + "".join(lines[at:]), keys


def _read(name: str) -> str:
    return resources.files("django_delayq").joinpath("lua", name + ".lua").read_text("utf-8")


@cache
def _library() -> dict[str, str]:
    return library(_read("lib"))


@cache
def load(name: str) -> Script:
    """Script ``name`` with its includes inlined. Its first line names it and lib.lua, so
    an EVAL of it is recognisable in SLOWLOG and MONITOR."""
    text, keys = with_prelude(name, _read(name))
    source = "-- django-delayq %s.lua with its lib.lua blocks\n%s" % (
        name, expand(name + ".lua", text, _library()))
    return Script(name=name, source=source, sha=hashlib.sha1(source.encode()).hexdigest(),
                  bound=BOUNDS[name], keys=keys)


def keys_of(name: str, names: Any, **extra: str | None) -> tuple[str, ...]:
    """``load(name).keys_of(names, **extra)``: the ``KEYS`` of a call of script ``name``."""
    return load(name).keys_of(names, **extra)
