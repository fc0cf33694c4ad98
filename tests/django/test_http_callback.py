"""HTTP callback jobs against a real local HTTP server (http.server in a thread)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from django_delayq import schedule
from django_delayq.contrib.http import UPSTREAM_BACKOFF, CallbackFailed, post_json
from django_delayq.models import Job, JobAttempt
from django_delayq.pytest_plugin import delayq  # noqa: F401  (the fixture under test)

PATH = "django_delayq.contrib.http.post_json"


class Upstream:
    """Answers POSTs with the scripted (status, delay_s) list, then 200s; records requests."""

    def __init__(self) -> None:
        self.script: list[tuple[int, float]] = []
        self.requests: list[dict[str, Any]] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                upstream.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": json.loads(raw or b"null")})
                status, delay = upstream.script.pop(0) if upstream.script else (200, 0.0)
                time.sleep(delay)
                payload = json.dumps({"got": len(upstream.requests)}).encode()
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d/hook" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_2xx_is_success_and_the_body_is_json(upstream):
    upstream.script = [(201, 0.0)]
    out = post_json(upstream.url, {"order": 42, "note": "é"}, headers={"X-Token": "t"})
    assert out == {"status": 201, "body": '{"got": 1}'}
    (req,) = upstream.requests
    assert req["body"] == {"order": 42, "note": "é"}
    assert req["headers"]["Content-Type"] == "application/json"
    assert req["headers"]["X-Token"] == "t"
    assert "Idempotency-Key" not in req["headers"]  # not running as a job


@pytest.mark.parametrize("status", [500, 404, 302, 204])
def test_other_statuses_raise(upstream, status):
    upstream.script = [(status, 0.0)]
    expected = [200] if status == 204 else None
    with pytest.raises(CallbackFailed, match="answered %d" % status) as info:
        post_json(upstream.url, {}, expected=expected)
    assert info.value.status == status
    assert [r["path"] for r in upstream.requests] == ["/hook"]  # a 302 is not followed


def test_timeout_and_refused_connection_raise(upstream):
    upstream.script = [(200, 1.5)]
    t0 = time.monotonic()
    with pytest.raises(CallbackFailed, match="no answer within 0.3s"):
        post_json(upstream.url, {}, timeout=0.3)
    assert time.monotonic() - t0 < 1.4
    upstream.server.shutdown()
    upstream.server.server_close()
    with pytest.raises(CallbackFailed, match="POST"):
        post_json(upstream.url, {}, timeout=1)


def test_only_http_urls():
    with pytest.raises(ValueError, match="http"):
        post_json("file:///etc/passwd", {})


@pytest.mark.django_db
def test_scheduled_callback_500_then_200_retries_on_the_backoff(delayq_settings, delayq,  # noqa: F811
                                                               upstream):
    upstream.script = [(500, 0.0), (200, 0.0)]
    handle = schedule(PATH, upstream.url, {"order": 7}, backoff=UPSTREAM_BACKOFF)
    job = Job.objects.get(pk=handle.id)
    assert job.max_attempts == len(UPSTREAM_BACKOFF) + 1 == 10
    assert delayq.run_due_jobs() == 1
    job.refresh_from_db()
    assert job.status == "retrying" and "answered 500" in job.last_error
    assert delayq.advance(timedelta(seconds=14)) == 0  # first retry is 15 s later
    assert delayq.advance(timedelta(seconds=2)) == 1
    job.refresh_from_db()
    assert job.status == "succeeded" and job.attempts == 2
    assert job.result == {"status": 200, "body": '{"got": 2}'}
    assert [r["headers"]["X-Delayq-Attempt"] for r in upstream.requests] == ["1", "2"]
    assert {r["headers"]["Idempotency-Key"] for r in upstream.requests} == {handle.id}
    (attempt,) = JobAttempt.objects.filter(job_id=handle.id)
    assert attempt.error.startswith("CallbackFailed: POST %s answered 500" % upstream.url)


@pytest.mark.django_db
def test_scheduled_callback_that_times_out_is_retried(delayq_settings, delayq, upstream):  # noqa: F811
    upstream.script = [(200, 1.0)]
    handle = schedule(PATH, upstream.url, {"n": 1}, timeout=0.2, backoff=[60])
    assert delayq.run_due_jobs() == 1
    job = Job.objects.get(pk=handle.id)
    assert job.status == "retrying" and "no answer within 0.2s" in job.last_error
    assert delayq.advance(61) == 1
    job.refresh_from_db()
    assert job.status == "succeeded"
