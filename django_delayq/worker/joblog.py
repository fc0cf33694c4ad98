"""One log line per job event, so an operator can follow the jobs in the worker's log.

INFO when an attempt starts, succeeds, or fails and will be retried; a job that ends dead
is logged at ERROR by ``settle.py``. Each line names the job id, its callable, queue and
attempt, and (once it ran) the attempt's duration::

    job 01J... shop.tasks.close_order queue=default attempt=1 started
    job 01J... shop.tasks.close_order queue=default attempt=1 succeeded in 0.012s
    job 01J... shop.tasks.close_order queue=default attempt=1 failed in 0.480s, retry at
        2026-01-31T12:00:15+00:00: shop.errors.Timeout: gateway did not answer

Every value on a line is escaped (``logtext.shown``): a control character, a line break or a
bidirectional override in a job id, callable path, queue or error text (an id or a row
written into Redis or the database directly) is written as its Python escape
(``\\n``, ``\\x1b``, ``\\u202e``), so it cannot forge a log line or recolour a terminal.

``DELAYQ["LOG_JOBS"] = False`` turns these lines off (the logger stays: its level and
handlers are the project's ``LOGGING``; the logger is ``django_delayq.worker.joblog``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from django_delayq.engine.logtext import shown

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings
    from django_delayq.engine.outcomes import ClaimedJob
    from django_delayq.worker.outcome import Outcome

logger = logging.getLogger(__name__)


def wanted(settings: Settings) -> bool:
    """Whether job lines are written (skip building their arguments if not)."""
    return settings.log_jobs and logger.isEnabledFor(logging.INFO)


def _line(settings: Settings, job: ClaimedJob, path: str, what: str, *args: object) -> None:
    """A job's line: its id, callable, queue and attempt, then ``what`` % ``args``."""
    if wanted(settings):
        logger.info("job %s %s queue=%s attempt=%d " + what, shown(job.id), shown(path),
                    shown(job.queue), job.attempt, *args)


def started(settings: Settings, job: ClaimedJob, path: str) -> None:
    _line(settings, job, path or "?", "started")


def succeeded(settings: Settings, o: Outcome) -> None:
    _line(settings, o.job, o.path, "succeeded in %.3fs", o.duration_s)


def retrying(settings: Settings, o: Outcome, retry_at: datetime) -> None:
    if wanted(settings):  # not the texts of a line that is not written
        _line(settings, o.job, o.path, "failed in %.3fs, retry at %s: %s: %s", o.duration_s,
              retry_at.isoformat(timespec="seconds"), shown(o.error_type), shown(o.error, 2000))
