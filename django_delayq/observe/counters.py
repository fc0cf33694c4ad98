"""Prometheus counters and histograms of the jobs (the ``prometheus`` extra), updated
in-process: by receivers of the lifecycle signals (cheap: no I/O) and, for the claimed
jobs the worker does not run, by ``count_set_aside``. They live in prometheus_client's
default registry, which ``prometheus.py`` serves with the gauges it reads at scrape time;
this module needs neither Redis nor the settings, so the worker's hand-over counts
without importing the exporter.

A labelled series exists from its first increment; ``zero(queues)`` makes each queue's
series (every documented status and reason) exist at 0 before that, so that
Prometheus' ``increase()`` counts a worker's first dead job too (it counts nothing for a
series' first sample): a worker serving its metrics calls it for its queues.

Without ``prometheus_client`` importing this module does nothing: no receivers are
connected and ``count_set_aside`` is a no-op.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from django_delayq import compat, signals

if TYPE_CHECKING:
    from datetime import datetime

    from prometheus_client.metrics import MetricWrapperBase

prom = compat.prometheus_client
FINAL = ("succeeded", "dead", "cancelled", "expired")  # delayq_jobs_finished_total's statuses
SET_ASIDE_REASONS = ("no_row", "final_row", "other_queue")  # payloads.Aside.kind
LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                    30.0, 60.0, 300.0, 1800.0)

if prom is not None:
    SCHEDULED = prom.Counter("delayq_jobs_scheduled", "Jobs scheduled", ["queue"])
    STARTED = prom.Counter("delayq_jobs_started", "Job attempts started", ["queue"])
    FINISHED = prom.Counter("delayq_jobs_finished",
                            "Jobs that reached a final status (succeeded, dead, cancelled, "
                            "expired)",
                            ["queue", "status"])
    RETRIES = prom.Counter("delayq_job_retries", "Failed attempts that will be retried",
                           ["queue"])
    LATENESS = prom.Histogram("delayq_job_lateness_seconds",
                              "Start of an attempt minus its due time", ["queue"],
                              buckets=LATENESS_BUCKETS)
    DURATION = prom.Histogram("delayq_job_duration_seconds", "Run time of successful attempts",
                              ["queue"], buckets=DURATION_BUCKETS)
    SET_ASIDE = prom.Counter("delayq_jobs_set_aside",
                             "Claimed jobs not run because their audit row is missing "
                             "(reason no_row) or final (final_row)", ["queue", "reason"])

    @functools.cache
    def _child(metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(...)``, memoised: the lookup costs more than the increment."""
        return metric.labels(*labels)

    def _counted(metric: MetricWrapperBase, *labels: str) -> Callable[..., None]:
        """A receiver adding one to ``metric`` for the job's queue (and ``labels``)."""
        return lambda queue, **kwargs: _child(metric, queue, *labels).inc()

    def _started(queue: str, due_at: datetime, started_at: datetime, **kwargs: object) -> None:
        _child(STARTED, queue).inc()
        _child(LATENESS, queue).observe(max(0.0, (started_at - due_at).total_seconds()))

    def _succeeded(queue: str, duration: float | None, **kwargs: object) -> None:
        _child(FINISHED, queue, "succeeded").inc()
        if duration is not None:  # None: settled from Redis's record, the run not timed
            _child(DURATION, queue).observe(duration)

    def _cancelled(queue: str, running: bool, **kwargs: object) -> None:
        if not running:  # a running job's cancellation is reported twice (api + worker)
            _child(FINISHED, queue, "cancelled").inc()

    _RECEIVERS: dict[str, Callable[..., None]] = {
        "job_scheduled": _counted(SCHEDULED), "job_started": _started,
        "job_succeeded": _succeeded, "job_retrying": _counted(RETRIES),
        "job_dead": _counted(FINISHED, "dead"), "job_cancelled": _cancelled,
        "job_expired": _counted(FINISHED, "expired"),
        "jobs_scheduled": lambda queue, job_ids, **kwargs: _child(SCHEDULED, queue).inc(
            len(job_ids))}
    for _name, _receiver in _RECEIVERS.items():
        signals.observe(getattr(signals, _name), _receiver)


def zero(queues: Iterable[str]) -> None:
    """Each job series of each of ``queues`` present (0 until counted; a series counted
    already keeps its value): every final status, retries, the set-aside reasons, the
    histograms. A no-op without prometheus-client."""
    if prom is None:
        return
    for queue in queues:
        for metric in (SCHEDULED, STARTED, RETRIES, LATENESS, DURATION):
            _child(metric, queue)
        for status in FINAL:
            _child(FINISHED, queue, status)
        for reason in SET_ASIDE_REASONS:
            _child(SET_ASIDE, queue, reason)


def count_set_aside(queue: str, reason: str) -> None:
    """One claimed job the worker did not run: ``reason`` is ``no_row``, ``final_row`` or
    ``other_queue`` (``payloads.read``). A no-op without prometheus-client."""
    if prom is not None:
        _child(SET_ASIDE, queue, reason).inc()
