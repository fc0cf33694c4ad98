"""Who may have run a job in data Redis lost: the workers registry a reconciler read just
before the loss, judged after it (``core/reconcile.py``'s epoch check;
``reconcile_state.count_lost_deliveries`` asks ``Witness.charges``).

A restart without persistence takes the workers registry with the queues, so after a
loss the registry cannot say who was active before it; charging every due row an attempt
that "may have run" then charged every row of a backlog, although the workers were alive.
So each epoch check reads the registry first (``Witness.read``: one ``ZRANGEBYSCORE`` of
a few entries, every ``EPOCH_CHECK_SECONDS``), then the epochs. A queue whose epochs that
check read keeps the registry read (``Snapshot``): it was read before any later loss of
that data. When the queue's loss is seen, the snapshot it kept becomes that loss's
``LossView``, and its rows are judged by the remembered workers, with the rule
``Liveness.seeds`` applies to a live registry:

* a remembered worker active since the row's moment has gone silent (``SILENT_BEATS``
  heartbeat periods, counted from when the loss was seen too: nobody beats into a Redis
  that is down; no clean stop recorded after its last beat): it may have run the job and
  died unrecorded: +1 (the audit's "may have run");
* each of them heard from a heartbeat period after the loss was seen (that beat's extend
  found its leases gone: the jobs it held unstarted are dropped, ``Housekeeping.heartbeat``,
  so any run of a lost delivery had started before it and its ``running`` flush has landed
  ``confirm`` seconds later), and the row read that much after: nobody ran it, no charge;
* else undecided: the row waits for the next look; the loss pass does not begin while
  a remembered worker is neither (``waiting``), so a backlog is read once, judged.

No snapshot (a reconciler started after the loss), a stale one (the next check began
more than ``FRESH_SECONDS`` after it: workers may have joined unseen), or an empty one
(deliveries from no registered worker): the caller keeps its conservative charge. A
worker that joined, claimed, ran and died unrecorded between the snapshot and the loss
(about a second) is not seen; nor a run whose ``running`` flush a stalled database held
up past the second look (as outside a loss).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.utils import timezone

from django_delayq.core import worker_stops
from django_delayq.core.validation import at_ms
from django_delayq.core.worker_stops import SILENT_BEATS

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine import Engine
    from django_delayq.models import Job

# A snapshot is trusted when the next epoch check after it began within this many seconds:
# a loss after that check was seen by it, so the registry it kept is at most this old.
FRESH_SECONDS = 3.0


@dataclass(slots=True)
class Snapshot:
    beats: dict[str, float]  # worker id -> last heartbeat (Redis ms), as read
    read_at: float  # monotonic, before the read
    next_at: float | None = None  # monotonic: when the next epoch check began


@dataclass(slots=True)
class LossView:
    beats: dict[str, float]  # the registry remembered from before the loss
    seen_ms: int  # Redis ms when the loss was seen
    heard: dict[str, float] = field(default_factory=dict)  # worker -> first beat after it
    # worker -> monotonic: when a beat ``confirm`` after that one was first seen
    ready: dict[str, float] = field(default_factory=dict)


class Witness:
    """The registry snapshots and loss views of one reconciler of ``queues``."""

    def __init__(self, engine: Engine, settings: Settings, queues: tuple[str, ...],
                 confirm_seconds: float) -> None:
        self.engine, self.settings, self.queues = engine, settings, queues
        self.confirm_ms = int(confirm_seconds * 1000)
        self._kept: dict[str, Snapshot] = {}  # queue -> the registry read before its epochs
        self.views: dict[str, LossView] = {}  # queue -> its last loss, judged

    def read(self) -> Snapshot:
        """The registry now: read before the epochs of the same check. Also marks when
        this check began for the snapshots kept so far."""
        now = time.monotonic()
        for kept in self._kept.values():
            if kept.next_at is None:
                kept.next_at = now
        return Snapshot(dict(self.engine.beats_since(0)), now)

    def checked(self, snapshot: Snapshot, lost: Iterable[str], unread: Iterable[str]) -> None:
        """The epoch check that followed ``snapshot`` found ``lost`` lost; the queues of
        ``unread`` had data sets it could not read (their loss may be older)."""
        lost, seen_ms = set(lost), None
        for queue in lost:
            kept = self._kept.get(queue)
            if kept is None or not kept.beats or kept.next_at is None \
                    or kept.next_at - kept.read_at > FRESH_SECONDS:
                self.views.pop(queue, None)  # the conservative charge
                continue
            seen_ms = self.engine.time_ms() if seen_ms is None else seen_ms
            self.views[queue] = LossView(kept.beats, seen_ms)
        # read before epochs this check found (a loss's new one included): before any
        # later loss of them; not for a queue whose loss may be older (a node unread)
        self._kept = {q: snapshot for q in self.queues if q not in set(unread)}

    def waiting(self, queue: str) -> bool:
        """Whether the loss of ``queue`` is still being judged: a remembered worker neither
        heard from twice after it nor silent. Its loss pass waits meanwhile, rather than
        leaving every row it reads for a later look."""
        view = self.views.get(queue)
        if view is None:
            return False
        _, dead, clean, _ = self._judge(view)
        return not all(w in view.ready or w in dead or w in clean for w in view.beats)

    def _judge(self, view: LossView) -> tuple[dict[str, float], set[str], set[str], int]:
        """Each remembered worker's last beat (Redis ms), those dead, those that stopped
        cleanly after their last beat, and Redis's clock minus this host's; notes those
        heard after the loss (``heard``, ``ready``)."""
        ids = sorted(view.beats)
        now_ms, now = self.engine.time_ms(), time.monotonic()
        offset_ms = now_ms - at_ms(timezone.now())  # Redis's clock - this host's
        period = self.settings.lease_ms // 3
        last: dict[str, float] = {}
        for w, score in zip(ids, self.engine.worker_beats(ids), strict=True):
            last[w] = max(view.beats[w], -1.0 if score is None else score)
            if score is not None and score > view.seen_ms + period:  # its extend: after
                first = view.heard.setdefault(w, score)
                if score >= first + self.confirm_ms:  # alive well after its last lost run
                    view.ready.setdefault(w, now)
        # silent: no beat for SILENT_BEATS periods, that long after the loss was seen too
        # (while Redis was down or empty nobody could beat)
        quiet = now_ms - SILENT_BEATS * period
        silent = [(w, b) for w, b in last.items() if b < quiet and view.seen_ms < quiet]
        clean = worker_stops.stopped(silent, offset_ms)  # stopped after its last beat
        return last, {w for w, _ in silent} - clean, clean, offset_ms

    def charges(self, queue: str, rows: Sequence[Job],
                read_at: float | None) -> dict[str, int | None] | None:
        """What each of ``rows`` (due before the loss of ``queue``, read at ``read_at``,
        monotonic; None: unknown) is charged for a delivery in the lost data: 1, 0, or
        None (decide at the next look). None: no view, the caller decides."""
        view = self.views.get(queue)
        if view is None:
            return None
        last, dead, clean, offset_ms = self._judge(view)
        found: dict[str, int | None] = {}
        for row in rows:
            active = at_ms(max(row.updated_at, row.run_at)) + offset_ms - self.settings.lease_ms
            mine = [w for w, b in last.items() if b >= active]
            if any(w in dead for w in mine):
                found[row.pk] = 1
            elif read_at is not None and all(
                    w in view.ready and view.ready[w] <= read_at for w in mine if w not in clean):
                found[row.pk] = 0
            else:
                found[row.pk] = None
        return found
