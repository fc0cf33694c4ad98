"""The live dashboard in the admin: per queue counts, next due time and paused state;
jobs finished per minute and lateness p50/p95 over the last 15 minutes (``last_minutes``);
the workers with the jobs they run and each job's progress (its row), as
``observe.redis_state`` reads them.

The page is static HTML plus one script (``django_delayq/dashboard.js``) that polls the
JSON view every few seconds and draws everything with DOM text nodes and SVG elements:
no inline script or style, no external asset, and every value from Redis or a row is
inserted as text, never as HTML. Both views need ``django_delayq.view_job``; the page is
served with a strict Content-Security-Policy.

The last minutes come from the audit rows (``last_minutes``): jobs finished per minute
and the lateness (start minus due time) of the attempts started in each minute, p50 and
p95.

Both queries go through the ``(status, run_at)`` index and are bounded in time: rows of
the finishing statuses due between ``WINDOW + DUE_LOOKBACK`` ago and now. A job that
started more than ``DUE_LOOKBACK`` after its due time is therefore left out of the
charts (a backlog that late shows on the queues page and in the lateness metric). The
finished counts are grouped in the database; the lateness samples are read newest due
first, at most ``SAMPLE_CAP`` rows (``sampled`` says when the cap was reached).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

from django.contrib.admin import ModelAdmin
from django.contrib.auth.decorators import permission_required
from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from redis.exceptions import RedisError

from django_delayq.admin import display
from django_delayq.core import progress
from django_delayq.core.connection import get_engine
from django_delayq.engine.logtext import shown
from django_delayq.models import Job, JobStatus
from django_delayq.observe import redis_state

logger = logging.getLogger(__name__)

VIEW = "django_delayq.view_job"
POLL_MS = 3000
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
               "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self'; "
               "frame-ancestors 'self'")
ID_PLACEHOLDER = "JOB-ID"
TEXT_CHARS = 200  # of a text from a worker's info entry


@permission_required(VIEW, raise_exception=True)
def dashboard_page(request: HttpRequest, admin: ModelAdmin[Any]) -> HttpResponse:
    site = admin.admin_site.name
    response = display.render(
        request, admin, "dashboard", _("Live dashboard"), poll_ms=POLL_MS,
        data_url=display.job_url(site, "dashboard_data"),
        job_url=display.job_url(site, "change", ID_PLACEHOLDER),
        queues_url=display.job_url(site, "queues"))
    response["Content-Security-Policy"] = PAGE_POLICY
    return response


def snapshot() -> dict[str, Any]:
    """Everything the dashboard shows, as JSON-ready data (times in epoch ms)."""
    now = timezone.now()
    data: dict[str, Any] = {
        "now_ms": int(now.timestamp() * 1000), "redis_error": None,
        **last_minutes(now), "queues": [], "workers": [], "holding": None, "groups": []}
    try:
        engine = get_engine()
        queues = redis_state.queues(engine)
        workers = redis_state.with_progress(redis_state.workers(engine)[::-1])  # newest first
        data["queues"] = [queue_data(q) for q in queues]
        data["workers"] = [worker_data(w) for w in workers]
        data["holding"] = asdict(redis_state.held(queues, workers))
        data["groups"] = [asdict(g) for g in redis_state.busiest(  # docs/groups.md
            engine, [q.queue for q in queues])]
    except RedisError as exc:
        logger.warning("dashboard: Redis unavailable: %s", shown(exc))
        data["redis_error"] = str(exc)
    return data


def queue_data(q: redis_state.QueueRow) -> dict[str, Any]:
    return {"queue": q.queue, "due_now": q.ready, "scheduled": q.scheduled,
            "inflight": q.inflight, "dead": q.dead, "next_due_ms": q.next_due_ms,
            "paused": q.paused, "limit": q.limit_text}


def _text(value: object) -> str:
    return value[:TEXT_CHARS] if isinstance(value, str) else ""


def worker_data(w: redis_state.WorkerRow) -> dict[str, Any]:
    """An info entry not a worker's JSON, or over the read limit, shows none of its
    fields; each running job with its progress as compact text ("" for none)."""
    return {"id": _text(w.id), "host": _text(w.info.get("host")),
            "pid": redis_state.integer(w.info.get("pid")), "processes": w.processes,
            "heartbeat_age_s": w.heartbeat_age_s, "running": w.running,
            "prefetched": w.prefetched, "malformed": w.error is not None, "jobs": [
                {"id": _text(j.id), "queue": _text(j.queue), "callable": _text(j.callable),
                 "age_s": j.age_s, "progress": progress.compact(j.progress, 80)}
                for j in w.jobs if j.id]}


@permission_required(VIEW, raise_exception=True)
def dashboard_data(request: HttpRequest) -> JsonResponse:
    return JsonResponse(snapshot())  # admin_view adds never_cache: Cache-Control no-store


# -- the last minutes, from the audit rows -------------------------------------------------

WINDOW_MINUTES = 15
DUE_LOOKBACK = timedelta(hours=1)
SAMPLE_CAP = 20_000
FINISHED = (JobStatus.SUCCEEDED, JobStatus.DEAD)
STARTED = (JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.DEAD)


def _floor(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def percentile(sorted_values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of an ascending list; None when it is empty."""
    if not sorted_values:
        return None
    rank = max(1, -(-len(sorted_values) * fraction // 1))
    return sorted_values[int(rank) - 1]


def last_minutes(now: datetime) -> dict[str, Any]:
    """The ``WINDOW_MINUTES`` minutes up to ``now`` (the current one last, partial), as
    the dashboard's JSON gives them (``minutes``: each one's start in epoch ms), and
    whether the lateness samples were capped (``sampled``)."""
    first = _floor(now) - timedelta(minutes=WINDOW_MINUTES - 1)
    due = Job.objects.filter(run_at__gte=first - DUE_LOOKBACK, run_at__lte=now)
    finished = {_floor(row["minute"]): row["n"] for row in due.filter(
        status__in=FINISHED, finished_at__gte=first).annotate(
        minute=TruncMinute("finished_at")).values("minute").annotate(n=Count("pk")).order_by()}
    samples = list(due.filter(status__in=STARTED, started_at__gte=first).order_by("-run_at")
                   .values_list("run_at", "started_at")[:SAMPLE_CAP + 1])
    lateness: dict[datetime, list[float]] = {}
    for run_at, started_at in samples[:SAMPLE_CAP]:
        if started_at is None:  # excluded by the filter; for the type checker
            continue
        ms = max(0.0, (started_at - run_at).total_seconds() * 1000)
        lateness.setdefault(_floor(started_at), []).append(ms)
    minutes = []
    for start in (first + timedelta(minutes=i) for i in range(WINDOW_MINUTES)):
        values = sorted(lateness.get(start, []))
        minutes.append({"start_ms": int(start.timestamp() * 1000),
                        "finished": finished.get(start, 0), "started": len(values),
                        "p50_ms": percentile(values, 0.5), "p95_ms": percentile(values, 0.95)})
    return {"minutes": minutes, "sampled": len(samples) > SAMPLE_CAP}
