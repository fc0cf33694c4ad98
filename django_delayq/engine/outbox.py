"""What the outbox reconciler (``core/reconcile.py``) asks of Redis, in bounded calls.

* **Epochs** (``{prefix:queue}:epoch``): read them all in one round trip; create one
  with ``SET NX`` (whoever comes first wins, the others get the winner's value).
* **Presence**: where each job of a list is (pending, ready or in flight, dead, an envelope
  without a place, re-enqueued moments ago) and its attempts counter, read atomically
  (one MULTI, one slot; no TIME inside: a Redis Cluster pipeline refuses keyless
  commands). Ten reads a job (the settled record and the runs entry among them).
* **Settled records of silent workers** (``settled_before``): the oldest records, by
  page, for the reconciler's look at the workers gone silent (``core/reconcile_records.py``).
* **Re-enqueue**: ``reenqueue.lua`` puts back the jobs Redis holds nowhere, has no
  settled record of and did not re-enqueue within the keep time, remembers them in
  ``{prefix:queue}:reconciled`` and raises their attempts counters to the seeds (never
  lowering one): one script, so two reconcilers never both put a job back.

Each MULTI (and each re-enqueue call) carries at most ``scripts.RECONCILE_CHUNK`` jobs:
a MULTI blocks Redis like a script (ten reads a job: ~4 us a row, ~0.4 ms for 100).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_delayq.engine import scripts
from django_delayq.engine.base import RedisOwner
from django_delayq.engine.replies import chunks
from django_delayq.engine.replies import integer as _int

if TYPE_CHECKING:
    from django_delayq.engine.replies import Scalar

# A job to re-enqueue: (id, due ms), (id, due ms, priority) or (id, due ms, priority, group).
ReJob = tuple[str, int] | tuple[str, int, int] | tuple[str, int, int, str]

logger = logging.getLogger(__name__)


def _str(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class Presence:
    """Where Redis holds one job. ``queued``: pending, ready or in flight; ``waiting``:
    pending or ready (not in flight), read in the same MULTI. ``dead``: in the
    dead set since ``died_ms`` (None when its score is not a time). ``envelope``: its
    payload is stored. ``reconciled_ms``: when a reconciler re-enqueued it, if it is
    remembered. ``attempts``: the attempt number of its latest delivery (its token minus
    the runs entry's offset), 0 when absent or not a number. ``settled``: how a worker
    settled it, while that worker's audit row has not landed (None: no record)."""

    queued: bool
    dead: bool
    died_ms: int | None
    envelope: bool
    reconciled_ms: float | None
    attempts: int
    settled: Settled | None = None
    waiting: bool = False


@dataclass(frozen=True, slots=True)
class Settled:
    """A settled record (``keys.QueueKeys.settled``): the job ended ``code`` ("s"
    succeeded, "x" expired, "c" cancelled while it ran) in its attempt number ``attempt``,
    settled by the worker ``holder`` at ``at_ms`` (server clock) under the lease token
    ``token`` (None in a record written before tokens were kept: "<code> <attempt>
    <holder>")."""

    code: str
    attempt: int
    holder: str
    at_ms: int
    token: int | None = None

    @classmethod
    def parse(cls, raw: bytes | str | None, score: Scalar) -> Settled | None:
        """The record from its HASH value ("<code> <attempt> <holder> <token>", or the
        older "<code> <attempt> <holder>") and ZSET score; None when either is missing or
        not what a script wrote (a value planted by hand is ignored)."""
        parts = (_str(raw) or "").split(" ", 2)
        if len(parts) != 3 or parts[0] not in ("s", "x", "c") or score is None:
            return None
        attempt, holder, token = _int(parts[1]), parts[2], None
        last = holder.rsplit(" ", 1)
        if len(last) == 2 and last[1].isascii() and last[1].isdigit():  # the token
            holder, token = last[0], int(last[1])
        return cls(parts[0], attempt, holder, _int(score), token) if attempt > 0 else None


def _offset(runs: bytes | str | None) -> int:
    """The offset of a runs entry (``<token> <offset> <streak>``): token - attempt."""
    parts = (_str(runs) or "").split(" ")
    return _int(parts[1]) if len(parts) > 1 else 0


class OutboxOps(RedisOwner):
    def epochs(self, queues: Sequence[str]) -> list[str | None]:
        """The epoch value of each of the data sets ``queues`` (None where there is
        none)."""
        pipe = self.client.pipeline(transaction=False)
        for queue in queues:
            pipe.get(self.keys(queue).epoch)
        return [_str(raw) for raw in pipe.execute()]

    def data_sets(self, queue: str) -> list[str]:
        """The data sets holding ``queue``'s jobs, each a full queue under a hash tag of
        its own with its own epoch: the queue itself (a sharded queue's are its shards,
        engine/sharded.py). ``epochs``, ``set_holds_data`` and ``create_epoch`` take
        these names."""
        return [queue]

    def home_of(self, queue: str, job_id: str) -> str:
        """The data set ``job_id`` is enqueued into (one of ``data_sets(queue)``)."""
        return queue

    def holds_data(self, queue: str) -> bool:
        """Whether Redis holds anything of ``queue`` in any of its data sets."""
        return any(self.set_holds_data(name) for name in self.data_sets(queue))

    def set_holds_data(self, name: str) -> bool:
        """Whether Redis holds anything of the data set ``name``: jobs in any place,
        attempts, envelopes, or ids a reconciler re-enqueued."""
        k = self.keys(name)
        return bool(self.client.exists(*k.all(), k.reconciled))

    def create_epoch(self, queue: str, value: str) -> str:
        """Set the epoch of ``queue`` to ``value`` unless it has one (``SET NX``); returns
        the epoch it holds now (``value``, or the one another process set first)."""
        key = self.keys(queue).epoch
        if self.client.set(key, value, nx=True):
            return value
        return _str(self.client.get(key)) or value

    def presence(self, queue: str, job_ids: Sequence[str]) -> list[Presence]:
        """Where each of ``job_ids`` is in ``queue`` (one MULTI per
        ``scripts.RECONCILE_CHUNK`` ids; each MULTI reads its ids atomically)."""
        return [found for chunk in chunks(job_ids, scripts.RECONCILE_CHUNK)
                for found in self._presence(queue, chunk)]

    def _presence(self, queue: str, job_ids: Sequence[str]) -> list[Presence]:
        k = self.keys(queue)
        pipe = self.client.pipeline(transaction=True)
        for job_id in job_ids:
            pipe.hexists(k.jobs, job_id)
            for placed in (k.pending, k.ready, k.inflight, k.dead, k.reconciled):
                pipe.zscore(placed, job_id)
            pipe.hget(k.attempts, job_id)
            pipe.zscore(k.settled, job_id)
            pipe.hget(k.settled_by, job_id)
            pipe.hget(k.runs, job_id)
        replies = pipe.execute()
        out = []
        for i in range(len(job_ids)):
            (has_env, pending, ready, inflight, dead, recent, attempts, settled_at,
             settled_by, runs) = replies[10 * i:10 * i + 10]
            waiting = pending is not None or ready is not None
            out.append(Presence(queued=waiting or inflight is not None,
                                dead=dead is not None, died_ms=_int(dead) or None,
                                envelope=bool(has_env), reconciled_ms=recent,
                                attempts=max(0, _int(attempts) - _offset(runs)),
                                settled=Settled.parse(settled_by, settled_at),
                                waiting=waiting))
        return out

    def settled_before(self, name: str, before_ms: int, count: int,
                       start: int = 0) -> list[tuple[str, Settled]]:
        """The settled records of the data set ``name`` written before ``before_ms``
        (server ms), oldest first: ``count`` of them from the ``start``-th (two reads; a
        record forgotten in between, or not as a script writes it, is left out)."""
        k = self.keys(name)
        found = self.client.zrangebyscore(k.settled, "-inf", int(before_ms), start, count,
                                          withscores=True)
        if not found:
            return []
        raws = self.client.hmget(k.settled_by, [raw for raw, _ in found])
        return [(raw.decode(errors="replace") if isinstance(raw, bytes) else raw, record)
                for (raw, score), value in zip(found, raws, strict=True)
                if (record := Settled.parse(value, score)) is not None]

    def reenqueue(self, queue: str, jobs: Sequence[ReJob],
                  seeds: Mapping[str, int | None], *, keep_ms: float, keep_max: int,
                  epochs: Mapping[str, str] | None = None) -> int:
        """Enqueue ``jobs`` ((id, due ms), (id, due ms, priority) or (id, due ms, priority,
        group), payload elsewhere) again; returns how many were
        new. Per call of ``reenqueue.lua`` (at most ``scripts.RECONCILE_CHUNK`` jobs):
        skip the ids Redis holds, has a settled record of, or re-enqueued within
        ``keep_ms``; enqueue the others, remember them in ``reconciled`` (at most
        ``keep_max``) and give each job in ``seeds`` (its value: the most attempts it
        may have had, None as 0) a token from the Redis clock, one no delivery had, even
        a delivery in data lost unseen. ``epochs``: the epoch
        the caller last saw of each data set (queue or shard name); where Redis now holds
        another (the data was lost since), that data set's jobs are left alone."""
        k = self.keys(queue)
        head: list[Any] = [0, k.channel, int(keep_ms), int(keep_max), (epochs or {}).get(queue, "")]
        added = 0
        for chunk in chunks(jobs, scripts.RECONCILE_CHUNK):
            args = head + [value for job in chunk for value in (
                job[0], job[1], job[2] if len(job) > 2 else 0, job[3] if len(job) > 3 else "",
                "" if job[0] not in seeds else seeds[job[0]] or 0)]
            reply = self._run("reenqueue", scripts.keys_of("reenqueue", k), args)
            if len(reply) > 2:
                logger.info("queue %r: its Redis data changed since the reconciler last looked; "
                            "%d job(s) left to the loss pass", queue, len(chunk))
            added += int(reply[0])
        return added
