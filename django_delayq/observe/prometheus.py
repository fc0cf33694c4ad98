"""Prometheus metrics (the ``prometheus`` extra: ``pip install prometheus-client``).

Counters and histograms are updated in-process (observe/counters.py, imported by the app's
``ready()``: receivers of the lifecycle signals, cheap, no I/O; the worker's count of jobs
set aside), in the default registry served here; queue depths are
read from Redis (``Engine.stats``, one script call per queue) when Prometheus scrapes,
with each queue's paused state (``Engine.paused``)
and limit (``Engine.queue_limit``), and the limit and running jobs of each callable of
``DELAYQ['CALLABLE_LIMITS']`` (``Engine.limit_state``), and, opt-in (``METRICS_GROUPS``:
label cardinality), the due and running jobs of the busiest groups (observe/redis_state.py,
docs/groups.md). Expose them from the worker with
``start_http_server(port)`` and from Django with ``django_delayq.metrics_views.metrics``.

Without ``prometheus_client`` importing this module does nothing: no receivers are
connected, and serving the metrics raises ``ImproperlyConfigured``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_delayq import compat
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.queues import known_queues
from django_delayq.engine.logtext import shown
from django_delayq.engine.shard_health import ERRORS
from django_delayq.observe import counters, redis_state

logger = logging.getLogger(__name__)

prom = compat.prometheus_client
STATES = ("scheduled", "ready", "inflight", "dead")
Q, C, G = ["queue"], ["callable"], ["queue", "group"]  # the gauges' labels
GAUGES = (  # name, help, labels
    ("delayq_queue_jobs", "Jobs in Redis by queue and state", ["queue", "state"]),
    ("delayq_queue_oldest_ready_age_seconds",
     "How long the oldest due job has waited for a worker", Q),
    ("delayq_queue_paused", "1 when the queue is paused (its jobs are not claimed): on every "
     "shard that answers", Q),
    ("delayq_queue_paused_shards", "The queue's shards that answered holding it paused "
     "(a sharded queue partly paused: below its shard count)", Q),
    ("delayq_queue_rate_limit_per_second", "A queue's rate limit: job claims per second", Q),
    ("delayq_queue_concurrency_limit",
     "A queue's concurrency limit: most of its jobs in flight", Q),
    ("delayq_callable_rate_limit_per_second",
     "A callable's rate limit (CALLABLE_LIMITS): starts per second", C),
    ("delayq_callable_concurrency_limit", "A callable's concurrency limit (CALLABLE_LIMITS)", C),
    ("delayq_callable_running", "Running jobs of a callable with CALLABLE_LIMITS", C),
    ("delayq_group_due_jobs", "Due jobs of the groups with the most (METRICS_GROUPS)", G),
    ("delayq_group_running", "Running jobs of those groups", G),
    ("delayq_group_paused", "1 when the group is paused", G),
    ("delayq_workers", "Workers that sent a heartbeat within two leases", None),
    ("delayq_redis_up", "1 when Redis answered this scrape", None))


def _require() -> Any:
    if prom is None:
        raise ImproperlyConfigured("django-delayq metrics need prometheus-client: "
                                   "pip install 'django-delayq[prometheus]'")
    return prom


# -- queue depths, read at scrape time ------------------------------------------------

class QueueCollector:
    """Gauges from Redis at each scrape: jobs per queue and state, oldest ready job's
    age, paused queues, queue and callable limits, running jobs per limited callable,
    live workers; ``delayq_redis_up`` is 0 when Redis did not answer."""

    def describe(self) -> Iterator[Any]:
        yield from self._families().values()

    def _families(self) -> dict[str, Any]:
        from prometheus_client.core import GaugeMetricFamily  # optional extra
        return {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc, labels in GAUGES}

    def collect(self) -> Iterator[Any]:
        families = self._families()
        up = families.pop("delayq_redis_up")
        try:
            self._read(families)
        except Exception as exc:  # noqa: BLE001 - a scrape must answer even when Redis is down
            logger.warning("metrics: could not read queue stats: %s", shown(exc))
            families = {}  # nothing read: delayq_redis_up alone, 0
        up.add_metric([], 1 if families else 0)
        yield from (*families.values(), up)

    def _read(self, f: dict[str, Any]) -> None:
        settings, engine = get_settings(), get_engine()
        rows = redis_state.queues(engine, known_queues(settings), partial=True)
        queues = [q.queue for q in rows if not q.unavailable]  # else its node is down
        for q in rows:
            if q.unavailable:
                logger.warning("metrics: queue %r unavailable: %s", q.queue, shown(q.unavailable))
                continue
            for state in STATES:
                f["delayq_queue_jobs"].add_metric([q.queue, state], getattr(q, state))
            age = 0.0 if q.oldest_ready_ms is None else (q.now_ms - q.oldest_ready_ms) / 1000
            f["delayq_queue_oldest_ready_age_seconds"].add_metric([q.queue], max(0.0, age))
            f["delayq_queue_paused"].add_metric([q.queue], 1 if q.paused else 0)
            f["delayq_queue_paused_shards"].add_metric([q.queue], q.paused_shards)
            if q.limit is not None:
                _limit(f, "queue", q.queue, q.limit.rate, q.limit.concurrency)
        for c in redis_state.callable_limits(engine, settings, partial=True):
            _limit(f, "callable", c.callable, c.rate, c.concurrency)
            if c.unavailable is None:  # else its node is down
                f["delayq_callable_running"].add_metric([c.callable], c.running)
        for u in (redis_state.busiest(engine, queues, settings.metrics_groups)
                  if settings.metrics_groups else []):
            f["delayq_group_due_jobs"].add_metric([u.queue, u.group], u.due)
            f["delayq_group_running"].add_metric([u.queue, u.group], u.running)
            f["delayq_group_paused"].add_metric([u.queue, u.group], 1 if u.paused else 0)
        # the Redis clock: as a queue read it, else (none answered) its own read
        now_ms = next((q.now_ms for q in rows if not q.unavailable), None)
        try:
            live = engine.count_workers((engine.time_ms() if now_ms is None else now_ms)
                                        - 2 * settings.lease_ms)
        except ERRORS as exc:  # the registry's cluster node is down: the gauge left out
            logger.warning("metrics: could not read the workers registry: %s",
                           shown(redis_state.unreadable(engine, exc)))
        else:
            f["delayq_workers"].add_metric([], live)


def _limit(f: dict[str, Any], kind: str, label: str, rate: tuple[int, int] | None,
           concurrency: int | None) -> None:
    if rate is not None:  # (starts, per_ms) as starts per second
        f["delayq_%s_rate_limit_per_second" % kind].add_metric([label], rate[0] * 1000 / rate[1])
    if concurrency is not None:
        f["delayq_%s_concurrency_limit" % kind].add_metric([label], concurrency)


# -- the registry served: the counters' (prometheus_client's default) and the gauges ----

if prom is not None:
    REGISTRY = prom.REGISTRY
    REGISTRY.register(QueueCollector())


def start_http_server(port: int, addr: str = "127.0.0.1",
                      queues: Iterable[str] | None = None) -> Any:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread (the worker calls this
    for ``--metrics-port``, with its queues); returns the server (``.server_address``,
    ``.shutdown()``). The job counters of ``queues`` (None: every queue configured) are
    on the page from the start, at 0 (``counters.zero``). Loopback by default: the page
    names queues and callables, so exposing it to other hosts (``addr="0.0.0.0"``) is the
    operator's explicit choice."""
    client = _require()
    counters.zero(known_queues(get_settings()) if queues is None else queues)
    server, _thread = client.start_http_server(port, addr=addr, registry=REGISTRY)
    logger.info("metrics on http://%s:%d/metrics", "[%s]" % addr if ":" in addr else addr,
                server.server_address[1])
    return server


def exposition() -> tuple[bytes, str]:
    """The current metrics in Prometheus' text format, and its content type."""
    client = _require()
    return client.generate_latest(REGISTRY), client.CONTENT_TYPE_LATEST
