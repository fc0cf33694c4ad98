"""``ShardedEngine``: the ``Engine`` of engine.py with each queue spread over shards.

Callers name the logical queue; this class finds the shards (engine/shard_map.py) and
runs the one-data-set methods of ``Engine`` on each (no script changes: a shard is a
full queue under a hash tag of its own). A queue of one shard costs nothing extra
(one record read per ``SPAN_REFRESH_SECONDS``).

* ``enqueue`` groups the jobs by home shard (one chunked call per shard).
* ``claim`` starts at the next shard at each call and fills the batch from the
  following ones; it reports the earliest next-due time of the shards it asked (now,
  when it stopped with a full batch before asking them all). Due order holds within a
  shard, and across shards to the extent of one claim round.
* Methods by id (ack, nack, extend, release, defer, cancel, reschedule, requeue, inspect,
  the reconciler's presence) ask the home shard, then the other shards of the span for
  the ids it did not hold (a job enqueued under another shard count): an id is found
  wherever it is while its home shard answers (else ``ShardDown``, for the calls on one id
  on their first try too). Each checks the lease token: a shard not holding the job is untouched.
* Reads and operations of the whole queue (stats, purge, pause, resume, recover,
  expiring, the wake channels) cover every shard of the span; jobs come back under the
  logical queue name. The reads (stats, paused, the oldest pending job, recover,
  expiring) leave out a shard whose node fails (``ShardHealth``), and those every shard
  answers alike (the queue limit, the paused and held groups) ask the next shard; they
  raise only when no shard answers. The status reads (all but recover and expiring)
  leave out only a node that does not answer: an error a node answers is raised. Pause
  and resume try every shard; a failure on some raises ``PartialControl`` naming them.
* Queue limits (rate, concurrency, the groups') are refused on a queue of more than one
  shard: each shard would enforce its own (so are group overrides, by the core API).
  Each shard has its own epoch (the reconciler's data-loss mark: ``data_sets``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from django_delayq.engine.engine import MAX_BATCH, Engine, checked
from django_delayq.engine.outbox import Presence, ReJob
from django_delayq.engine.outcomes import (
    CancelOutcome,
    ClaimResult,
    MoveOutcome,
    NackOutcome,
    NewJob,
    QueueLimit,
    QueueStats,
    Recovered,
)
from django_delayq.engine.replies import grouped
from django_delayq.engine.shard_health import ERRORS, UNREACHABLE, PartialControl, ShardHealth
from django_delayq.engine.shard_map import ShardMap, shard_name

_T = TypeVar("_T")
# The presence of a job whose shard cannot be read now: as if queued (nothing to do yet)
UNREADABLE = Presence(queued=True, dead=False, died_ms=None, envelope=False,
                      reconciled_ms=None, attempts=0)
_R = TypeVar("_R")
_S = TypeVar("_S", bound="ShardedEngine")
_F = TypeVar("_F", bound=Callable[..., Any])


def _first_answer(method: _F) -> _F:
    """``method`` (of ``Engine``: a read every shard answers alike) on shard 0, or, while
    its node is down, on the first other shard that answers (``ShardedEngine._each``)."""
    def on_shards(self: ShardedEngine, queue: str, *args: object, **kwargs: object) -> object:
        return self._each(self.shard_queues(queue), lambda name: method(
            self, name, *args, **kwargs), first=True, skip=UNREACHABLE)[0]
    return cast(_F, on_shards)


class ShardLimitError(ValueError):
    """A queue limit (rate or concurrency) asked for a queue of more than one shard."""


def _min(values: Iterable[int | None]) -> int | None:
    return min((v for v in values if v is not None), default=None)


def _by_id(method: _F, missed: Callable[[Any], bool]) -> _F:
    """``method`` (of ``Engine``, on one job id) on the job's home shard, then on the
    others until one holds it (``missed``: the reply of a shard that does not)."""
    def on_shards(self: ShardedEngine, queue: str, job_id: str, *args: object,
                  **kwargs: object) -> object:
        try:
            return self._routed(queue, [job_id], str, lambda name, part: [
                method(self, name, job_id, *args, **kwargs)], missed)[0]
        except UNREACHABLE as exc:  # its node's error: ShardDown, as on the next tries
            raise ShardHealth.as_down(self.shard_map.home(queue, job_id), exc)  # noqa: B904
    return cast(_F, on_shards)


def _by_ids(method: _F, id_of: Callable[[Any], str], missed: Callable[[Any], bool],
            unknown: Callable[[Any], Any] | None = None) -> _F:
    """``method`` (of ``Engine``, on a list of jobs: one reply each) on each job's home
    shard, then on the others for the jobs no shard held yet (``ShardedEngine._routed``,
    as is ``unknown``)."""
    def on_shards(self: ShardedEngine, queue: str, items: Sequence[object], *args: object,
                  **kwargs: object) -> object:
        return self._routed(queue, items, id_of, lambda name, part: method(
            self, name, part, *args, **kwargs), missed, unknown)
    return cast(_F, on_shards)


def _on_every(method: _F, what: str) -> _F:
    """``method`` (of ``Engine``: pause, resume, a group's) on every shard, each tried
    even when one fails; True when any changed. A failure on some shards raises
    ``PartialControl`` naming the shards reached (one on every shard, its first error)."""
    def on_shards(self: ShardedEngine, queue: str, *args: object) -> object:
        reached, failed, changed = [], {}, False
        errors: list[BaseException] = []
        for i, name in enumerate(self.shard_queues(queue)):
            try:
                changed |= bool(self.health.run(name, lambda: method(self, name, *args)))  # noqa: B023
                reached.append("%s#%d" % (queue, i))  # shard 0 too, though its keys say Q
            except ERRORS as exc:
                failed["%s#%d" % (queue, i)] = str(exc) or type(exc).__name__
                errors.append(exc)
        if errors and not reached:
            raise errors[0]
        if failed:
            group = "group %r of " % (args[0],) if args else ""
            raise PartialControl("%s of %squeue %r" % (what, group, queue), reached, failed)
        return changed
    return cast(_F, on_shards)


class ShardedEngine(Engine):
    """``shards``: queue -> shard count (absent: 1). None: no queue sharded, nothing
    read to find out (a bare engine, as engine.py's)."""

    def __init__(self, client: Any, prefix: str = "delayq",
                 clock: Callable[[], int] | None = None,
                 shards: Mapping[str, int] | None = None) -> None:
        super().__init__(client, prefix, clock)
        self.shard_map = ShardMap(shards)
        self.health = ShardHealth()  # shards whose node failed: skipped for a while

    @classmethod
    def like(cls: type[_S], other: Any, *args: Any, **kwargs: Any) -> _S:
        """A new engine of this class on ``other``'s client, prefix and shard counts
        (``args`` and ``kwargs`` follow them to the constructor)."""
        kwargs.setdefault("shards", getattr(getattr(other, "shard_map", None), "counts", None))
        return cls(other.client, other.prefix, *args, **kwargs)

    # -- where ----------------------------------------------------------------------

    def shard_queues(self, queue: str) -> list[str]:
        """The data set names of every shard of ``queue``'s span, shard 0 first. While
        shard 0's node is set aside, the span last read (no wait on a node that is down)."""
        span = self.shard_map.cached(queue) if self.health.down(queue) else None
        if span is None:
            span = self.shard_map.span(self.client, queue,
                                       lambda i: self.keys(shard_name(queue, i)).shards)
        return [shard_name(queue, i) for i in range(span)]

    data_sets = shard_queues  # a shard is a data set (OutboxOps.data_sets)

    def _routed(self, queue: str, items: Sequence[_T], id_of: Callable[[_T], str],
                call: Callable[[str, list[_T]], list[_R]], missed: Callable[[_R], bool],
                unknown: Callable[[_T], _R] | None = None) -> list[_R]:
        """``call`` on each shard with the items homed there, then on the other shards
        with the items no shard held yet; results in the order of ``items``. A shard that
        fails (or is set aside: ``ShardHealth``) costs the others nothing: they are
        served, then its error is raised, unless ``unknown(item)`` answers for its items.
        A shard looked at only for ids away from home is skipped while it fails."""
        names = self.shard_queues(queue)
        if len(names) == 1:
            return call(names[0], list(items))
        homes = [self.shard_map.home(queue, id_of(item)) for item in items]
        out: dict[int, _R] = {}
        errors: list[BaseException] = []
        for name in names:
            picked = [i for i in range(len(items)) if homes[i] == name]
            try:
                self._call_some(name, picked, items, call, out)
            except ERRORS as exc:
                if unknown is None:
                    errors.append(exc)
                out.update((i, unknown(items[i])) for i in picked if unknown is not None)
        for name in names:
            picked = [i for i in range(len(items))
                      if homes[i] != name and i in out and missed(out[i])]
            # an id away from home on a shard that fails: not found there
            with contextlib.suppress(*ERRORS):
                self._call_some(name, picked, items, call, out)
        if errors:
            raise errors[0]
        return [out[i] for i in range(len(items))]

    def _call_some(self, name: str, picked: list[int], items: Sequence[_T],
                   call: Callable[[str, list[_T]], list[_R]], out: dict[int, _R]) -> None:
        if picked:
            found = self.health.run(name, lambda: call(name, [items[i] for i in picked]))
            out.update(zip(picked, found))

    def _each(self, names: Sequence[str], call: Callable[[str], _R], every: bool = False,
              first: bool = False, skip: tuple[type[BaseException], ...] = ERRORS) -> list[_R]:
        """``call`` on each of the shards ``names`` that works (``first``: until one
        did); a failing one is skipped (``ShardHealth``). Raises only when none worked,
        or (``every``) when one failed, once every other was served, or at once on an
        error not of ``skip`` (the reads of the whole queue skip only a node that does
        not answer: ``UNREACHABLE``)."""
        done: list[_R] = []
        errors: list[BaseException] = []
        for name in names:
            if first and done:
                break
            try:
                done.append(self.health.run(name, lambda: call(name)))  # noqa: B023
            except skip as exc:
                errors.append(exc)
        if errors and (every or not done):
            raise errors[0]
        return done

    # -- producing and consuming ----------------------------------------------------

    def enqueue(self, queue: str, jobs: Iterable[NewJob], now_ms: int | None = None) -> int:
        if self.shard_map.count(queue) > 1:
            self.shard_queues(queue)  # the record covers every shard written to
            return self._by_home(queue, checked(jobs), lambda job: job.id,
                                 lambda name, part: super(ShardedEngine, self).enqueue(
                                     name, part, now_ms))
        # one shard, the queue itself (every job's home; schedule()'s path): no grouping.
        # A node that just failed fails the call at once here too
        if not (jobs := checked(jobs)):
            return 0
        return self.health.run(queue, lambda: super(ShardedEngine, self).enqueue(
            queue, jobs, now_ms))

    def _by_home(self, queue: str, items: Iterable[_T], id_of: Callable[[_T], str],
                 call: Callable[[str, list[_T]], int]) -> int:
        """The sum of ``call`` on each shard with the items homed there; a failing shard
        costs the others nothing (its jobs stay in the outbox), then its error is raised."""
        groups = grouped(items, lambda item: self.shard_map.home(queue, id_of(item)))
        return sum(self._each(list(groups), lambda name: call(name, groups[name]), every=True))

    def claim(self, queue: str, limit: int, lease_ms: int,
              now_ms: int | None = None) -> ClaimResult:
        """Claims from the shards in turn (see the module docstring); a shard whose node
        fails is skipped while ``ShardHealth`` sets it aside, and the reply's next due
        time is no later than when it may be tried again. Raises when no shard answered."""
        names = self.shard_queues(queue)
        if len(names) == 1:
            return super().claim(queue, limit, lease_ms, now_ms)
        want = max(1, min(limit, MAX_BATCH))
        start = self.shard_map.turn(queue, len(names))
        results: list[ClaimResult] = []
        skipped: dict[str, BaseException] = {}  # shard -> its error
        for step in range(len(names)):
            left = want - sum(len(r.jobs) for r in results)
            if left <= 0:
                break
            name = names[(start + step) % len(names)]
            try:
                results.append(self.health.run(name, lambda: super(ShardedEngine, self).claim(
                    name, left, lease_ms, now_ms)))  # noqa: B023
            except ERRORS as exc:
                skipped[name] = exc
        if not results:
            raise next(iter(skipped.values()))
        merged = self._merged(queue, results,
                              complete=len(results) + len(skipped) == len(names))
        if not skipped:
            return merged
        retry = merged.now_ms + int(min(self.health.remaining_ms(n) for n in skipped))
        return dataclasses.replace(merged, next_due_ms=min(retry, merged.next_due_ms or retry))

    @staticmethod
    def _merged(queue: str, results: list[ClaimResult], complete: bool) -> ClaimResult:
        now = results[0].now_ms
        next_due = _min(r.next_due_ms for r in results)
        if not complete:  # shards not asked may hold due jobs: worth claiming again now
            next_due = now if next_due is None else min(next_due, now)
        return ClaimResult(
            now_ms=now, next_due_ms=next_due,
            jobs=[dataclasses.replace(job, queue=queue) for r in results for job in r.jobs],
            set_aside=[entry for r in results for entry in r.set_aside],
            paused=all(r.paused for r in results),
            blocked_until_ms=_min(r.blocked_until_ms for r in results),
            limited=any(r.limited for r in results),
            next_urgent_ms=_min(r.next_urgent_ms for r in results))

    _acked = _by_ids(Engine._acked, lambda row: row[0], operator.not_)
    nack = _by_ids(Engine.nack, lambda f: f[0], lambda outcome: outcome == NackOutcome.LEASE_LOST)

    def ack_stream(self, holder: str) -> Any:
        """``Engine.ack_stream`` for the queues of one shard (the others: ``ack``)."""
        stream = super().ack_stream(holder)
        if stream is not None and self.shard_map.counts is not None:  # else one shard each
            stream.covers = lambda queue: len(self.shard_queues(queue)) == 1
        return stream

    def forget_settled(self, queue: str, job_ids: Sequence[str], *, keep_ms: int,
                       now_ms: int | None = None) -> int:
        """Each shard forgets the ids homed in it; a record written in another shard
        (an id found away from home) goes with the keep time."""
        homes: dict[str, list[str]] = {name: [] for name in self.shard_queues(queue)} | grouped(
            job_ids, lambda job_id: self.shard_map.home(queue, job_id))
        return sum(super(ShardedEngine, self).forget_settled(name, ids, keep_ms=keep_ms,
                                                             now_ms=now_ms)
                   for name, ids in homes.items())

    extend = _by_ids(Engine.extend, lambda lease: lease[0], operator.not_)
    release = _by_ids(Engine.release, lambda job: job.id, operator.not_)
    defer = _by_ids(Engine.defer, lambda lease: lease[0], operator.not_)

    def _joined(self, queue: str, call: Callable[[str], list[_T]]) -> list[_T]:
        """The lists ``call`` returns on each working shard of ``queue``, one after another."""
        return [item for part in self._each(self.shard_queues(queue), call) for item in part]

    def recover(self, queue: str, **options: Any) -> list[Recovered]:
        contact = options.pop("contact", None)
        return self._joined(queue, lambda name: super(ShardedEngine, self).recover(
            name, contact=contact.part(name) if contact else None, **options))

    def expiring(self, queue: str, within_ms: int, limit: int = 100) -> list[str]:
        return self._joined(queue, lambda name: super(ShardedEngine, self).expiring(
            name, within_ms, limit))

    # -- managing -------------------------------------------------------------------

    cancel = _by_id(Engine.cancel, CancelOutcome.NOT_FOUND.__eq__)
    cancel_held = _by_id(Engine.cancel_held, CancelOutcome.NOT_FOUND.__eq__)
    reschedule = _by_id(Engine.reschedule, lambda reply: reply[0] == MoveOutcome.NOT_FOUND)
    requeue = _by_id(Engine.requeue, lambda reply: reply[0] == MoveOutcome.NOT_FOUND)
    inspect = _by_id(Engine.inspect, lambda found: found.place == "")

    def stats(self, queue: str, now_ms: int | None = None) -> QueueStats:
        names = self.shard_queues(queue)
        if len(names) == 1:
            return super().stats(queue, now_ms)
        parts = self._each(names, lambda name: super(ShardedEngine, self).stats(
            name, now_ms), skip=UNREACHABLE)  # a shard whose node is down: not counted
        counts = {f: sum(getattr(p, f) for p in parts)
                  for f in ("scheduled", "ready", "inflight", "dead", "expired_leases")}
        return QueueStats(now_ms=parts[0].now_ms, next_due_ms=_min(p.next_due_ms for p in parts),
                          oldest_ready_ms=_min(p.oldest_ready_ms for p in parts), **counts)

    def purge(self, queue: str) -> None:
        for name in reversed(self.shard_queues(queue)):  # shard 0 (the record) last
            super().purge(name)
        self.shard_map.forget(queue)

    def purge_pending(self, queue: str, limit: int = 200) -> list[str]:
        return next((ids for name in self.shard_queues(queue)
                     if (ids := Engine.purge_pending(self, name, limit))), [])

    pause = _on_every(Engine.pause, "pause")
    resume = _on_every(Engine.resume, "resume")
    pause_group = _on_every(Engine.pause_group, "pause")
    resume_group = _on_every(Engine.resume_group, "resume")
    # every shard holds the same (none for a queue limit: ``set_queue_limit``)
    queue_limit = _first_answer(Engine.queue_limit)
    paused_groups = _first_answer(Engine.paused_groups)
    held_groups = _first_answer(Engine.held_groups)

    def paused(self, queues: Sequence[str]) -> list[str]:
        """The queues every shard that answers holds paused (``pause_counts``): a queue
        paused on some shards only is not (claims go on in the others)."""
        counts = self.pause_counts(queues)
        return [q for q in queues if 0 < counts[q][0] == counts[q][1]]

    def pause_counts(self, queues: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Per queue: (its shards paused, its shards that answered). One round trip for
        all; on a Redis Cluster, when it fails (a node down), or a shard is set aside,
        each queue's shards one by one: a failing shard is left out (``_each``; a queue
        none of whose shards answers raises). On one Redis its failure is raised at once:
        Redis is unavailable."""
        names = {q: self.shard_queues(q) for q in queues}
        sets = [n for q in queues for n in names[q]]
        if not any(self.health.down(n) for n in sets):
            try:
                found = set(Engine.paused(self, sets))
            except UNREACHABLE:
                if not self.nodes_fail_alone:
                    raise
            else:
                return {q: (len(found.intersection(names[q])), len(names[q])) for q in queues}
        out = {}
        for q in queues:
            answers = self._each(names[q], lambda name: bool(Engine.paused(self, [name])),
                                 skip=UNREACHABLE)
            out[q] = (sum(answers), len(answers))
        return out

    def set_queue_limit(self, queue: str, *, rate: tuple[int, int] | None,
                        concurrency: int | None, groups: QueueLimit | None = None) -> None:
        names = self.shard_queues(queue)
        if len(names) > 1 and (rate is not None or concurrency is not None or groups):
            raise ShardLimitError("queue %r has %d shards: no rate or concurrency limit splits "
                                  "between them; remove it or the shards" % (queue, len(names)))
        if len(names) == 1:
            super().set_queue_limit(queue, rate=rate, concurrency=concurrency, groups=groups)
        else:
            self._each(names, lambda name: super(ShardedEngine, self).set_queue_limit(
                name, rate=None, concurrency=None))

    def oldest_pending(self, queue: str) -> tuple[str, float] | None:
        """The earliest head of the shards that answer (a failing one left out)."""
        heads = self._each(self.shard_queues(queue), lambda name: Engine.oldest_pending(
            self, name), skip=UNREACHABLE)
        return min((head for head in heads if head is not None), key=lambda head: head[1],
                   default=None)

    def home_of(self, queue: str, job_id: str) -> str:
        return self.shard_map.home(queue, job_id)

    # -- the reconciler and the wake channels ---------------------------------------

    # Where each job is; a job whose home shard fails is answered as queued (the
    # reconciler leaves it for a later pass: nothing can be written there now).
    presence = _by_ids(Engine.presence, str, lambda p: not (
        p.queued or p.dead or p.envelope or p.reconciled_ms is not None
        or p.settled is not None), unknown=lambda job_id: UNREADABLE)

    def reenqueue(self, queue: str, jobs: Sequence[ReJob],
                  seeds: Mapping[str, int | None], *, keep_ms: float, keep_max: int,
                  epochs: Mapping[str, str] | None = None) -> int:
        if len(self.shard_queues(queue)) == 1:
            return super().reenqueue(queue, jobs, seeds, keep_ms=keep_ms, keep_max=keep_max,
                                     epochs=epochs)
        return self._by_home(queue, jobs, lambda job: job[0], lambda name, part: super(
            ShardedEngine, self).reenqueue(name, part, seeds, keep_ms=keep_ms,
                                           keep_max=keep_max, epochs=epochs))

    @property
    def routes_events(self) -> bool:
        return any(n > 1 for n in (self.shard_map.counts or {}).values())

    def event_stream_of(self, queue: str, job_id: str) -> str:
        """A sharded queue's events go to their job's shard's stream (its node)."""
        if self.shard_map.count(queue) > 1:
            return self.keys(self.shard_map.home(queue, job_id)).events
        return super().event_stream_of(queue, job_id)

    def event_streams(self) -> list[str]:
        streams = super().event_streams()
        for queue, count in (self.shard_map.counts or {}).items():
            if count > 1:
                streams += [self.keys(name).events for name in self.shard_queues(queue)]
        return streams

    def wake_listener(self, queues: Iterable[str], event: Any) -> Any:
        listener = super().wake_listener([], event)
        listener.channels = {self.keys(name).channel: queue for queue in queues
                             for name in self.shard_queues(queue)}
        return listener
