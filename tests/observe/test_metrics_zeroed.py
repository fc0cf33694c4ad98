"""A worker's job counters are on its /metrics page from its start, at 0 for each of its
queues and each documented label value: Prometheus' ``increase()`` and ``rate()`` count
nothing for a series' first sample, so an alert on the first dead job after a start
(docs/observability.md) needs the series there before it. Each ``--processes`` child
serves its own page."""

from __future__ import annotations

import socket
import subprocess
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from django_delayq import compat
from tests.helpers import wait_until
from tests.redis_server import free_port
from tests.worker.conftest import worker_starter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker,
              pytest.mark.skipif(compat.prometheus_client is None, reason="no prometheus")]

STATUSES = ("succeeded", "dead", "cancelled", "expired")


@pytest.fixture
def start_worker(delayq_settings, tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:  # type: ignore[no-untyped-def]
    yield from worker_starter(delayq_settings, tmp_path)


def page(port: int) -> str | None:
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2) as resp:
            return resp.read().decode()
    except OSError:
        return None


def zeroed(text: str, queue: str) -> list[str]:
    """The lines a fresh worker's page must hold for ``queue``, missing from ``text``."""
    q = 'queue="%s"' % queue
    want = ["delayq_jobs_finished_total{%s,status=\"%s\"} 0.0" % (q, s) for s in STATUSES]
    want += ["%s{%s} 0.0" % (name, q) for name in (
        "delayq_jobs_scheduled_total", "delayq_jobs_started_total", "delayq_job_retries_total",
        "delayq_job_lateness_seconds_count", "delayq_job_duration_seconds_count")]
    want += ["delayq_jobs_set_aside_total{%s,reason=\"%s\"} 0.0" % (q, r)
             for r in ("no_row", "final_row", "other_queue")]
    return [line for line in want if line not in text.splitlines()]


def two_free_ports() -> int:
    """A free port whose next one is free too (each child serves one: port + i)."""
    while True:
        port = free_port()
        if port == 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port


def test_each_child_serves_its_queues_counters_at_zero_from_its_start(start_worker) -> None:  # type: ignore[no-untyped-def]
    port = two_free_ports()
    proc = start_worker("--processes", "2", "--queues", "default,emails",
                        "--metrics-port", str(port))
    pages: dict[int, str] = {}

    def served() -> bool:
        assert proc.poll() is None, "worker exited"
        for p in (port, port + 1):
            if p not in pages and (text := page(p)) is not None:
                pages[p] = text
        return len(pages) == 2

    wait_until(served, timeout=120)  # two children start Django on a busy machine
    for text in pages.values():
        assert zeroed(text, "default") == zeroed(text, "emails") == []
        assert 'delayq_jobs_finished_total{queue="slow"' not in text  # not one of its queues
