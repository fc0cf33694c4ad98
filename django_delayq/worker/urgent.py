"""The urgent timer: a thread that claims a queue's job of priority above 0 at its due time.

The main loop claims between settling and housekeeping; during a backlog one round (settle a
batch, claim ``CLAIM_BATCH`` jobs, read their payloads) lasts tens of milliseconds, and a
job coming due in the middle of it waited for the next round. Each claim reply tells the
due time of the queue's earliest job of priority above 0 still in pending
(``ClaimResult.next_urgent_ms``, claim.lua's urgent index), and a wake message tells it
when one placed comes first (lua/lib.lua ``line``); this thread sleeps until then
on the local clock and makes a small claim of its own (``claim``: the worker's), whatever
the main loop is doing. claim.lua promotes that job ahead of the backlog and leases the
lowest ready scores, so the job is among those claimed; the worker's local queue puts it
ahead of the claimed jobs of lower priority, and the next free thread starts it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

MAX_SLEEP_S = 1.0  # a due time noted meanwhile wakes it at once; this only bounds a wait


class UrgentTimer:
    def __init__(self, claim: Callable[[str], None], now_ms: Callable[[], float]) -> None:
        self._claim = claim  # claims a few jobs of the queue; notes the next due time
        self._now_ms = now_ms  # the server clock as the worker keeps it
        self._due: dict[str, int] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="delayq-urgent", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def note(self, queue: str, due_ms: int | None) -> None:
        """The queue's next urgent due time from a claim reply (None: there is none)."""
        with self._cond:
            if due_ms is None:
                self._due.pop(queue, None)
            elif self._due.get(queue) != due_ms:
                self._due[queue] = due_ms
                self._cond.notify()

    def earlier(self, queue: str, due_ms: int) -> None:
        """A wake message's due time (the channel tells an urgent job that comes first)."""
        with self._cond:
            if due_ms < self._due.get(queue, due_ms + 1):
                self._due[queue] = due_ms
                self._cond.notify()

    def _next(self) -> str | None:
        """Wait for the earliest due time; the queue to claim from, None when stopped."""
        with self._cond:
            while not self._stopped:
                if not self._due:
                    self._cond.wait(MAX_SLEEP_S)
                    continue
                queue, at = min(self._due.items(), key=lambda item: item[1])
                wait_s = (at - self._now_ms()) / 1000
                if wait_s <= 0:
                    del self._due[queue]  # the claim's reply notes the next one
                    return queue
                self._cond.wait(min(wait_s, MAX_SLEEP_S))
        return None

    def _run(self) -> None:
        while (queue := self._next()) is not None:
            try:
                self._claim(queue)
            except Exception as exc:  # noqa: BLE001 - the main loop claims it at its next round
                logger.debug("urgent claim of %s failed: %s", queue, exc)
                with self._cond:
                    self._cond.wait(0.1)
