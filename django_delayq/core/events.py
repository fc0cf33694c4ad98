"""The event stream: every job transition, appended to a capped Redis Stream.

Key ``{<prefix>}:events`` (a STREAM, capped with ``XADD MAXLEN ~ EVENTS_MAXLEN``); the
events of a sharded queue go to a stream on their shard's node instead,
``{<prefix>:<queue>#<i>}:events``, each capped the same (``engine/event_log.py``), and
readers merge the streams.
Each entry holds strings: ``event`` (scheduled, started, succeeded, retrying, dead,
cancelled, expired), ``job``, ``queue``, ``callable``, ``ts_ms`` (wall clock of the process
that saw it) and, depending on the event, ``attempt``, ``attempts``, ``worker``,
``run_at``, ``retry_at``, ``due_at``, ``expires_at``, ``lateness_ms``, ``duration_ms``,
``error_type`` and ``error`` (first 500 characters) and ``running``.

Events are written with ``events_add.lua`` in calls of at most ``scripts.MAX_EVENTS``
events (and ``scripts.MAX_EVENT_ARGS`` arguments): a burst of thousands of events is a
few short script calls, never one long one that would hold Redis (several are written
together, one round trip for up to ``event_log.PIPELINED``: ``engine/event_log.py``).

The receivers of :mod:`django_delayq.signals` never talk to Redis, nor wake a
thread per event: they append an event to an in-process buffer, O(1) (a raw one; ``scheduled``
formatted, at commit). A daemon thread formats and writes them on its own clock: every
``FLUSH_SECONDS`` (100 ms) while events come in numbers (the last flush wrote at least
``BUSY_EVENTS``), every ``IDLE_FLUSH_SECONDS`` (0.5 s) otherwise, and at once when
``WAKE_AT`` events are waiting; after ``PARK_TICKS`` ticks in a row with nothing to write
(~5 s) it sleeps until the next event wakes it. So an event is in the stream at most
~0.5 s after it was buffered while Redis answers (0.1 s while busy), and a process
calling ``schedule()`` now and then pays no thread wake per call (each wake was a
hand-over of the interpreter in the middle of the call, and a round trip per event).
``close()`` (at exit) writes what is left. The buffer is bounded; when Redis is
unreachable the oldest events are dropped (and counted), never the job.
``delayq_status --follow`` tails the stream of every worker with ``XREAD BLOCK``.

Enabled by ``DELAYQ["EVENTS"]`` (default True); ``DELAYQ["EVENTS_MAXLEN"]`` (default
10000) caps the stream.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.core.signals import setting_changed
from django.db import router, transaction
from django.dispatch import receiver

from django_delayq import signals
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine.event_log import EventLog
from django_delayq.engine.keys import GlobalKeys
from django_delayq.engine.shard_health import OUTAGES
from django_delayq.models import Job

logger = logging.getLogger(__name__)

# The flusher's tick while busy. The loop before this one waited 50 ms after its wake and,
# when events had come during a flush (always, in a drain), another 50 ms: 100 ms a
# tick. Ticking at 50 ms made a 20,000-job drain ~10 % slower (twice the flusher's
# round trips and hand-overs of the interpreter; Redis CPU a job up by ~10 % too).
FLUSH_SECONDS = 0.1
IDLE_FLUSH_SECONDS = 0.5  # the tick otherwise: the bound on how late an event is written
BUSY_EVENTS = 25  # a flush of at least this many (one script call's worth): busy
WAKE_AT = 2_000  # this many waiting wake the flusher at once (a burst: bounded memory)
PARK_TICKS = 10  # idle ticks in a row before the flusher sleeps until the next event
BUFFER_MAX = 50_000
ERROR_CHARS = 500
DEFAULT_MAXLEN = 10_000
EVENT_NAMES = ("scheduled", "started", "succeeded", "retrying", "dead", "cancelled", "expired")

Fields = dict[str, str]


def stream_key(prefix: str) -> str:
    """The stream of every queue under ``prefix`` (hash tag ``{prefix}``, like workers)."""
    return GlobalKeys(prefix).events


class EventStream:
    """A bounded buffer of events and the daemon thread that writes them to ``log``
    (the engine's ``EventLog``; or give a redis-py client, the stream's key and cap; or
    ``connect``, which makes the ``EventLog`` at a flush, tried again at each one until it
    works: a cluster client connects when it is made, so while no node answers the
    events wait in the buffer like any others kept for a retry)."""

    def __init__(self, client: object = None, key: str = "", maxlen: int = DEFAULT_MAXLEN,
                 flush_seconds: float = FLUSH_SECONDS, buffer_max: int = BUFFER_MAX,
                 idle_seconds: float = IDLE_FLUSH_SECONDS,
                 connect: Callable[[], EventLog] | None = None) -> None:
        self._connect = connect
        self._log = None if connect is not None else (
            client if isinstance(client, EventLog) else EventLog(client, key, maxlen))
        self.flush_seconds = flush_seconds  # the tick while busy
        self.idle_seconds = idle_seconds  # the tick otherwise (never below flush_seconds)
        self._buffer: deque[Fields] = deque(maxlen=buffer_max)
        self._stop = threading.Event()
        self.dropped = 0
        self.failing = False
        self.after_fork()  # the flusher's state

    def add(self, fields: Fields) -> None:
        """Buffer one event; O(1), no I/O. The flusher is woken only by a burst (``WAKE_AT``
        events waiting) or when it sleeps after a long idle spell, never per event."""
        buffer = self._buffer
        with self._lock:
            if len(buffer) == buffer.maxlen:
                self.dropped += 1
            buffer.append(fields)
            size = len(buffer)
        if self._thread is None:
            self._ensure_thread()
        if size == WAKE_AT or self._parked:
            self._wake.set()

    def pending(self) -> int:
        return len(self._buffer)

    @property
    def log(self) -> EventLog:
        """The writer; made by ``connect`` on first use (raises a Redis error meanwhile)."""
        if self._log is None:
            assert self._connect is not None
            self._log = self._connect()
        return self._log

    def flush(self) -> int:
        """Write every buffered event (bounded script calls); return how many were written.
        On a Redis error the events not yet written go back to the buffer.

        Flushes are serialised: a call made while the thread is writing a batch waits for
        that batch, so when ``flush()`` returns, every event added before the call is in
        the stream (or back in the buffer after a Redis error), not in another thread's
        hands."""
        with self._flushing:
            with self._lock:
                raw = list(self._buffer)
                self._buffer.clear()
            if not raw:
                return 0
            batch, done = raw, 0
            try:
                log = self.log  # made here when ``connect`` is given: it may fail like a write
                batch = log.order(_materialise(raw))  # grouped by stream: see engine/event_log.py
                for covered, sent, written in log.append(batch):
                    if written < sent:
                        logger.warning("event stream %r refused %d event(s) (a damaged stream? "
                                       "they are dropped)", log.key, sent - written)
                        self.dropped += sent - written
                    done += covered
            except OUTAGES as exc:  # a slot no node serves too; NOREPLICAS, READONLY ...
                # (events_add.lua answers a server that cannot write for now with an error)
                self._requeue(batch[done:])  # what was written stays written
                say = logger.debug if self.failing else logger.warning  # once per outage
                say("event stream: could not write %d event(s), kept for a retry: %s",
                    len(batch) - done, exc)
                self.failing = True
                return done
            if self.failing:
                self.failing = False
                logger.info("event stream: Redis is back; %d event(s) dropped meanwhile",
                            self.dropped)
            return len(raw)

    def _requeue(self, batch: list[Fields]) -> None:
        with self._lock:
            room = (self._buffer.maxlen or 0) - len(self._buffer)
            keep = batch[-room:] if room > 0 else []
            self.dropped += len(batch) - len(keep)
            self._buffer.extendleft(reversed(keep))

    def close(self) -> None:
        """Stop the thread after a last flush (atexit; tests)."""
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=2)
        self.flush()

    def after_fork(self) -> None:
        """The flusher's state, new: at the start, and in a forked child, where the
        parent's thread did not come along (a new one starts when events wait)."""
        self._thread: threading.Thread | None = None
        self._parked = False  # the flusher sleeps until an event comes
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one flush at a time: see flush()
        self._wake = threading.Event()  # a burst, a parked flusher's next event, close()
        if self._buffer:
            self._ensure_thread()

    def _ensure_thread(self) -> None:
        if self._thread is not None or self._stop.is_set():
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="delayq-events",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        """Tick and flush: every ``flush_seconds`` after a flush of ``BUSY_EVENTS`` or
        more, every ``idle_seconds`` otherwise (Redis down: the events wait for the next
        tick); after ``PARK_TICKS`` empty ticks, sleep until ``add()`` wakes it."""
        busy, quiet = True, 0  # the first tick is short: a drain starts at its pace
        while not self._stop.is_set():
            if quiet >= PARK_TICKS:
                self._parked = True
                if not self._buffer:  # read after _parked is set: add() sees one or the other
                    self._wake.wait()
                self._parked = False
                if self._stop.is_set():
                    return
                self._wake.clear()  # then a tick: the events that follow come along
                busy, quiet = True, 0
            period = self.flush_seconds if busy else max(self.flush_seconds, self.idle_seconds)
            self._wake.wait(period)  # coalesce: one pipeline per tick
            self._wake.clear()
            if self._stop.is_set():
                return
            written = 0
            try:
                written = self.flush()
            except Exception:  # noqa: BLE001 - the flusher must survive anything
                logger.exception("event stream flush failed")
            busy = written >= BUSY_EVENTS
            quiet = quiet + 1 if not written and not self._buffer else 0


# -- the process-wide stream -------------------------------------------------------------

_lock = threading.Lock()
_stream: EventStream | None = None


def _after_fork_in_child() -> None:
    if _stream is not None:
        _stream.after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def get_stream() -> EventStream | None:
    """The stream of this process, or None when DELAYQ["EVENTS"] is False."""
    global _stream  # noqa: PLW0603 - one per process, set under _lock
    stream = _stream
    if stream is not None:
        return stream
    s = get_settings()  # DELAYQ["EVENTS"], DELAYQ["EVENTS_MAXLEN"]
    if not s.events:
        return None
    with _lock:
        if _stream is None:
            # no client yet: schedule() never waits on (nor fails of) a connect here
            _stream = EventStream(connect=lambda: get_engine().event_log(s.events_maxlen))
        return _stream


def reset() -> None:
    """Flush and forget the current stream (settings changed; tests)."""
    global _stream
    with _lock:
        stream, _stream = _stream, None
    if stream is not None:
        stream.close()


def flush() -> int:
    """Write buffered events now (tests, shutdown)."""
    stream = _stream
    return stream.flush() if stream is not None else 0


# -- signal receivers --------------------------------------------------------------------


def _fields(event: str, kwargs: dict[str, Any], ts: float | None = None,
            first: dict[str, Any] | None = None) -> Fields:
    """An event's stream fields from its signal's ``kwargs``; ``first``: the kwargs of
    its attempt's ``started`` event, folded in (its due and start times, its callable)."""
    get, times = kwargs.get, kwargs if first is None else first
    path = get("callable_path") or times.get("callable_path")
    due, started = times.get("due_at"), times.get("started_at")
    out: Fields = {"event": event, "job": str(get("job_id", "")), "queue": str(get("queue", "")),
                   "callable": str(path or ""),
                   "ts_ms": str(int((time.time() if ts is None else ts) * 1000))}
    for name, given in (("attempt", "attempt"), ("attempts", "attempts"), ("worker", "worker_id")):
        if given in kwargs:
            out[name] = str(kwargs[given])
    if "running" in kwargs:
        out["running"] = str(int(kwargs["running"]))
    for name, value in (("run_at", get("run_at")), ("retry_at", get("retry_at")),
                        ("due_at", due), ("expires_at", get("expires_at"))):
        if value is not None:
            out[name] = _iso(value)
    if due is not None and started is not None:
        out["lateness_ms"] = "%.1f" % ((started - due).total_seconds() * 1000)
    if (duration := get("duration")) is not None:
        out["duration_ms"] = "%.1f" % (float(duration) * 1000)
    for name in ("error_type", "error"):
        if value := get(name):
            out[name] = str(value)[:ERROR_CHARS]
    return out


_FINAL = ("succeeded", "retrying", "dead")
_ISO: dict[datetime, str] = {}  # UTC times as text: a burst's jobs share their due times


def _iso(value: object) -> str:
    """``value.isoformat()`` (or ``str``); a UTC time's is remembered (only a UTC time:
    equal times of other zones have other texts)."""
    if not isinstance(value, datetime) or value.tzinfo is not UTC:
        return value.isoformat() if hasattr(value, "isoformat") else str(value)
    text = _ISO.get(value)
    if text is None:
        if len(_ISO) >= 1024:
            _ISO.clear()
        text = _ISO[value] = value.isoformat()
    return text


def _materialise(raw: list[Any]) -> list[Fields]:
    """Format buffered events. A ``started`` event whose attempt ended in the same batch
    is folded into that final event (its lateness and start time ride along), so a fast
    job costs one stream entry; a job still running at flush time keeps its own."""
    finals = {(item[2].get("job_id"), item[2].get("attempt")) for item in raw
              if isinstance(item, tuple) and item[0] in _FINAL}
    started: dict[Any, dict[str, Any]] = {}
    out: list[Fields] = []
    for item in raw:
        if not isinstance(item, tuple):
            out.append(item)
            continue
        event, ts, kwargs = item
        key = (kwargs.get("job_id"), kwargs.get("attempt"))
        if event == "started" and key in finals:
            started[key] = kwargs
            continue
        first = started.pop(key, None) if event in _FINAL else None
        out.append(_fields(event, kwargs, ts, first))
    return out


def _on_scheduled(sender: object, *, job_id: object = "", queue: object = "",
                  callable_path: object = None, run_at: object = None,
                  **others: object) -> None:  # others: none is sent today
    # Formatted here, not by the flusher: the same work a tick later, on data gone cold,
    # took ~2-3 µs more a call (measured: bench/schedule_path_threads.py). What
    # ``_fields`` makes of ``job_scheduled``'s arguments, without its general case.
    fields = {"event": "scheduled", "job": str(job_id), "queue": str(queue),
              "callable": str(callable_path or ""), "ts_ms": str(int(time.time() * 1000))}
    if run_at is not None:
        fields["run_at"] = _iso(run_at)
    # the job exists once the caller commits
    transaction.on_commit(functools.partial(_add, fields), using=router.db_for_write(Job))


def _add(item: Fields | tuple[str, float, dict[str, Any]]) -> None:
    """Buffer formatted fields, or a raw event ``(event, ts, kwargs)``: the flusher formats
    (or folds) it, off the job path."""
    if (stream := get_stream()) is not None:
        stream.add(item)  # type: ignore[arg-type]


def _receive(event: str, sender: object, **kwargs: object) -> None:
    _add((event, time.time(), kwargs))  # the receiver of the other events, one partial each


_RECEIVERS: dict[str, Callable[..., None]] = {
    "scheduled": _on_scheduled,
    **{name: functools.partial(_receive, name) for name in EVENT_NAMES if name != "scheduled"},
}


def connect() -> None:
    """Observe the signals (done on import, i.e. by ``DelayQConfig.ready()``); idempotent."""
    for name, fn in _RECEIVERS.items():
        signals.observe(getattr(signals, "job_%s" % name), fn)


def _close_at_exit() -> None:
    with contextlib.suppress(Exception):  # interpreter shutdown
        reset()


@receiver(setting_changed, dispatch_uid="delayq.events.settings")
def _on_setting_changed(*, setting: str, **kwargs: object) -> None:
    if setting == "DELAYQ":
        reset()


atexit.register(_close_at_exit)
connect()
