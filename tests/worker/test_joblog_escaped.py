"""The worker's job lines escape what they show: a job id, callable path, queue or error
with a line break, an escape sequence or a bidirectional override (written into Redis or a
row directly) reaches the log as its Python escape, one line per event."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from django_delayq.core.conf import get_settings
from django_delayq.engine import ClaimedJob, logtext
from django_delayq.engine.shard_health import ShardHealth
from django_delayq.worker import joblog
from django_delayq.worker.runner import Kind, Outcome

EVIL_ID = "01J\u202eevil\n2026 job 01X forged line"
EVIL_PATH = "tests.jobs.add\x1b[2J\r\x85"


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == joblog.logger.name]


def test_ids_paths_queues_and_errors_are_escaped(delayq_settings, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="django_delayq")
    settings = get_settings()
    job = ClaimedJob(queue="q\tq", id=EVIL_ID, due_ms=0, token=1, envelope="", attempt=1)
    now = datetime.now(UTC)
    done = Outcome(job=job, kind=Kind.SUCCESS, path=EVIL_PATH, started_at=now, finished_at=now)
    failed = Outcome(job=job, kind=Kind.RETRY, path=EVIL_PATH, started_at=now, finished_at=now,
                     error_type="x.Err\u2028", error="two\nlines \ud800")
    joblog.started(settings, job, EVIL_PATH)
    joblog.succeeded(settings, done)
    joblog.retrying(settings, failed, now)
    lines = _lines(caplog)
    assert len(lines) == 3
    for line in lines:
        assert line.isprintable(), line
        assert line.startswith(r"job 01J\u202eevil\n2026 job 01X forged line "
                               r"tests.jobs.add\x1b[2J\r\x85 queue=q\tq attempt=1 ")
    assert lines[2].endswith(r": x.Err\u2028: two\nlines \ud800")


def test_shown_cuts_long_values() -> None:
    assert logtext.shown("a" * 400) == "a" * 300 + "..."
    assert logtext.shown("plain") == "plain"


LIBPQ = "\n".join('connection to server at "db%d.internal" (10.0.0.%d), port 5432 failed: '
                   "%s" % (i, i, "timeout expired " * 12) for i in (1, 2))


def test_an_error_s_text_is_cut_at_the_error_limit(caplog) -> None:  # type: ignore[no-untyped-def]
    """A database or Redis error naming each host it tried (libpq with several hosts)
    keeps them all on an outage line: an exception is cut at 2,000 characters, escaped."""
    assert 300 < len(LIBPQ) < 2000
    assert logtext.shown(ConnectionError(LIBPQ)) == LIBPQ.replace("\n", "\\n")
    assert logtext.shown(ConnectionError("e" * 2500)) == "e" * 2000 + "..."
    caplog.set_level(logging.WARNING, logger="django_delayq")
    ShardHealth().failed("node-1", ConnectionError(LIBPQ))
    [line] = [r.getMessage() for r in caplog.records]
    assert line.isprintable() and "db2.internal" in line, line
