"""A Redis outage as one worker's reconciler saw it, and the passes it owes after one.

**After an outage, no long grace.** The incremental pass leaves alone rows changed
within ``RECONCILE_GRACE_SECONDS``: their on-commit enqueue may still be on its way.
When this worker saw Redis (or some of a queue's data sets) fail and then answer again,
the cause of a missing job is known: ``schedule()`` calls during the outage could not
enqueue. ``Outage`` then asks for passes over the rows changed since
``OUTAGE_MARGIN_SECONDS`` before the outage began, each with the incremental pass's
second look (a row found missing is re-enqueued only when a later look finds it
unchanged and still missing, so a job acked moments ago, its settled record or its audit
row on the way, is not run again) and skipping the rows changed within the last
``OUTAGE_GRACE_SECONDS`` (a send still on its way in its web process lands first).

When the passes run. The first ``OUTAGE_GRACE_SECONDS`` after Redis answered (an
enqueue in flight at that moment has landed by then); then one every
``OUTAGE_GRACE_SECONDS`` until ``BACKOFF_TAIL_SECONDS`` more have passed. A web process
that failed to reach a data set skips its sends there for up to
``shard_health.MAX_DELAY_SECONDS`` (5 s) after its last failure, without trying
(``ShardDown``: the row stays in the outbox, nothing reaches Redis later), and that
failure may have come up to a connect timeout (1 s) after its try began: the rows it
leaves after Redis answers again are written within ``BACKOFF_TAIL_SECONDS`` of it, and
the last pass, that long after, finds them. A pass is taken once the previous one is
done: passes due meanwhile make one.

When the outage began. Not when a failure was reported: a call on a stalled node waits
its reply timeout before it fails (5 s, or the URL's ``socket_timeout``), and the
keeper thread may have been held up before it, and ``schedule()`` calls that began
with the outage wrote their rows then. The outage
is dated from this reconciler's last look that worked (``worked``), less the margin: a
look that did not touch the stalled node works until a call on it fails (a reply
timeout after it began), so that look may come a few seconds after the stall began.
Its failures are its own looks (a tick that raised, an epoch that could not be read, or
a read that failed before a retry worked) and the failures the other parts of its
process count (``failures``: a data set or queue the worker backed off).

An outage that begins again before its passes ran keeps the rows of the earlier one:
the window begins where the earliest outage not yet walked to its end began
(``done``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

from django.utils import timezone

from django_delayq.engine.client import SOCKET_TIMEOUT_SECONDS
from django_delayq.engine.shard_health import MAX_DELAY_SECONDS

# rows changed this long before the look that worked last before the outage: a look that
# did not touch a stalled node works on until a call on it fails, a reply timeout after
# it began (that call may itself have begun up to a poll interval after the stall), and
# the rows the web processes wrote when the stall began are older than that look
OUTAGE_MARGIN_SECONDS = 5.0 + SOCKET_TIMEOUT_SECONDS
OUTAGE_GRACE_SECONDS = 2.0  # after Redis answers again: then the rows are looked at
# how long after Redis answers again a web process may still skip its sends without
# trying: the longest backoff of a data set, after a last try of a connect timeout (1 s)
BACKOFF_TAIL_SECONDS = MAX_DELAY_SECONDS + 1.0


class Outage:
    """An outage from its first failure seen to the look that worked again, and the
    passes over its rows (module docstring). ``clock``: monotonic seconds, ``now``: this
    host's time (tests pass theirs)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = timezone.now) -> None:
        self.clock, self.now = clock, now
        # when the outage under way, or the earliest whose rows are still owed a pass,
        # began (this host's clock; None: nothing owed)
        self.since: datetime | None = None
        self.down = False  # failing now
        self.ok_at: datetime | None = None  # the last look that worked
        self.next_at: float | None = None  # monotonic: when the next pass may start
        self.last_at = 0.0  # monotonic: the last pass starts at or after this
        self.taken = 0  # passes taken since Redis last answered again

    def failed(self) -> None:
        if not self.down:
            self.down = True
            began = self.ok_at or self.now()
            self.since = began if self.since is None else min(self.since, began)
        self.next_at = None  # while it fails, a pass would find nothing it can send

    def worked(self) -> None:
        self.ok_at = self.now()
        if self.down:
            self.down = False
            now = self.clock()
            self.next_at = now + OUTAGE_GRACE_SECONDS
            self.last_at = now + BACKOFF_TAIL_SECONDS + OUTAGE_GRACE_SECONDS
            self.taken = 0

    def take_pass(self) -> datetime | None:
        """The start of the rows a pass to start now walks (None: nothing to do yet); the
        pass skips the rows changed in the last ``OUTAGE_GRACE_SECONDS``."""
        now = self.clock()
        if self.since is None or self.next_at is None or now < self.next_at:
            return None
        self.next_at = None if now >= self.last_at else min(now + OUTAGE_GRACE_SECONDS,
                                                             self.last_at)
        self.taken += 1
        return self.since - timedelta(seconds=OUTAGE_MARGIN_SECONDS)

    def done(self) -> None:
        """A pass was walked to its end: when it was the last one, its rows are owed
        nothing more."""
        if not self.down and self.next_at is None:
            self.since = None
