"""HTTP callback jobs against a real local HTTP server (http.server in a thread).

The server listens on 127.0.0.1, which post_json refuses unless the operator allows it:
tests that talk to it take ``allow_local``; the others play the attacker who schedules a
callback to an internal address, or the server that answers one byte at a time.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_delayq import job as job_of
from django_delayq import schedule
from django_delayq.contrib.http import (
    RESULT_BODY_CHARS,
    UPSTREAM_BACKOFF,
    CallbackFailed,
    CallbackRefused,
    post_json,
)
from django_delayq.core import conf
from django_delayq.models import Job, JobAttempt
from django_delayq.pytest_plugin import delayq  # noqa: F401  (the fixture under test)

PATH = "django_delayq.contrib.http.post_json"
MODULE = "django_delayq.contrib.http"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    connections = 0

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.connections += 1  # every accepted TCP connection, request or not
        return True


class Upstream:
    """Answers POSTs with the scripted (status, delay_s) list, then 200s; records requests."""

    def __init__(self) -> None:
        self.script: list[tuple[int, float]] = []
        self.requests: list[dict[str, Any]] = []
        self.answer_size = 0  # > 0: answer with that many bytes instead of {"got": n}
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                upstream.requests.append({"path": self.path, "headers": dict(self.headers),
                                          "body": json.loads(raw or b"null")})
                status, delay = upstream.script.pop(0) if upstream.script else (200, 0.0)
                time.sleep(delay)
                payload = json.dumps({"got": len(upstream.requests)}).encode()
                if upstream.answer_size:
                    payload = b"x" * upstream.answer_size
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "/elsewhere")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d/hook" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Drip:
    """Accepts a POST, then sends its answer one byte every ``every`` seconds: from the
    status line on (``phase="status"``) or after complete headers (``phase="body"``)."""

    def __init__(self, phase: str, every: float = 0.5) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
                if phase == "body":
                    self.wfile.write(head)
                    head = b""
                for byte in (head + b"x" * 100)[:40]:
                    time.sleep(every)  # the drip itself, not a wait in the test
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:
                        return  # the client gave up

            def log_message(self, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/hook" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    _stop(server.server)


@pytest.fixture
def allow_local(settings):  # type: ignore[no-untyped-def]
    """The operator's explicit choice: 127.0.0.1 may be called; post_json is allowed."""
    allowed = list(settings.DELAYQ.get("ALLOWED_CALLABLES") or [])
    settings.DELAYQ = {**settings.DELAYQ, "ALLOWED_CALLABLES": [*allowed, MODULE],
                       "HTTP_CALLBACK_ALLOWED_NETWORKS": ["127.0.0.1"]}
    return settings


@pytest.fixture
def refuse_local(settings):  # type: ignore[no-untyped-def]
    """The default: post_json is allowed as a job, but no non-public address is."""
    allowed = list(settings.DELAYQ.get("ALLOWED_CALLABLES") or [])
    delayq_conf = {**settings.DELAYQ, "ALLOWED_CALLABLES": [*allowed, MODULE]}
    delayq_conf.pop("HTTP_CALLBACK_ALLOWED_NETWORKS", None)
    settings.DELAYQ = delayq_conf
    return settings


def test_2xx_is_success_and_the_body_is_json(upstream, allow_local):
    upstream.script = [(201, 0.0)]
    out = post_json(upstream.url, {"order": 42, "note": "é"}, headers={"X-Token": "t"})
    assert out == {"status": 201, "body": '{"got": 1}'}
    (req,) = upstream.requests
    assert req["body"] == {"order": 42, "note": "é"}
    assert req["headers"]["Content-Type"] == "application/json"
    assert req["headers"]["X-Token"] == "t"
    assert req["headers"]["Host"] == "127.0.0.1:%d" % upstream.port
    assert "Idempotency-Key" not in req["headers"]  # not running as a job


@pytest.mark.parametrize("status", [500, 404, 302, 204])
def test_other_statuses_raise(upstream, allow_local, status):
    upstream.script = [(status, 0.0)]
    expected = [200] if status == 204 else None
    with pytest.raises(CallbackFailed, match="answered %d" % status) as info:
        post_json(upstream.url, {}, expected=expected)
    assert info.value.status == status
    assert [r["path"] for r in upstream.requests] == ["/hook"]  # a 302 is not followed


def test_timeout_and_refused_connection_raise(upstream, allow_local):
    upstream.script = [(200, 1.5)]
    t0 = time.monotonic()
    with pytest.raises(CallbackFailed, match="no answer within 0.3s"):
        post_json(upstream.url, {}, timeout=0.3)
    assert time.monotonic() - t0 < 1.4
    _stop(upstream.server)
    with pytest.raises(CallbackFailed, match="POST"):
        post_json(upstream.url, {}, timeout=1)


def test_only_http_urls_and_no_credentials_in_them():
    with pytest.raises(ValueError, match="http"):
        post_json("file:///etc/passwd", {})
    with pytest.raises(CallbackRefused, match="credentials") as info:
        post_json("https://user:hunter2@partner.example/hook", {})
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("host, why", [
    ("2130706433", "127.0.0.1 is loopback"),  # decimal: what the reviewer used
    ("0x7f.1", "127.0.0.1 is loopback"),
    ("127.0.0.1", "127.0.0.1 is loopback"),
    ("localhost", "127.0.0.1 is loopback"),
    ("0", "0.0.0.0 is unspecified"),  # Linux routes 0.0.0.0 to this host
    ("[::1]", "::1 is loopback"),
    ("[::ffff:127.0.0.1]", "is IPv4-mapped loopback"),
    ("[2002:7f00:1::]", "is 6to4 loopback"),  # 6to4: an IPv4 address inside (127.0.0.1)
    ("[2002:a9fe:a9fe::]", "is 6to4 link-local"),  # 169.254.169.254
    ("[2002:a00:1::1]", "is 6to4 private"),  # 10.0.0.1
    ("169.254.169.254", "169.254.169.254 is link-local"),  # cloud metadata service
    ("10.0.0.1", "10.0.0.1 is private"),
    ("100.64.0.1", "100.64.0.1 is not public"),
])
def test_non_public_addresses_are_refused_without_connecting(upstream, refuse_local, host, why):
    url = "http://%s:%d/hook" % (host, upstream.port)
    t0 = time.monotonic()
    with pytest.raises(CallbackRefused, match="HTTP_CALLBACK_ALLOWED_NETWORKS") as info:
        post_json(url, {"steal": "metadata"}, timeout=5)
    assert why in str(info.value)
    assert time.monotonic() - t0 < 2  # refused, not a connect attempt timing out
    assert upstream.server.connections == 0 and upstream.requests == []


def test_an_allowed_network_is_reached_with_the_urls_host_header(upstream, allow_local):
    # The decimal form resolves to 127.0.0.1, which the operator allowed; the socket goes
    # to the vetted address while the Host header keeps what the URL said.
    url = "http://2130706433:%d/hook?x=1" % upstream.port
    assert post_json(url, {"n": 1})["status"] == 200
    (req,) = upstream.requests
    assert req["path"] == "/hook?x=1"
    assert req["headers"]["Host"] == "2130706433:%d" % upstream.port
    allow_local.DELAYQ = {**allow_local.DELAYQ, "HTTP_CALLBACK_ALLOWED_NETWORKS": ["10.0.0.0/8"]}
    with pytest.raises(CallbackRefused, match="127.0.0.1 is loopback"):
        post_json(url, {"n": 2})
    assert upstream.server.connections == 1


@pytest.mark.parametrize("bad", ["127.0.0.1/40", "not-an-ip", 5, "10.0.0.0/8,::1"])
def test_bad_allowed_networks_are_improperly_configured(settings, bad):
    settings.DELAYQ = {**settings.DELAYQ, "HTTP_CALLBACK_ALLOWED_NETWORKS": [bad]}
    with pytest.raises(ImproperlyConfigured, match="HTTP_CALLBACK_ALLOWED_NETWORKS"):
        conf.get_settings()


@pytest.mark.parametrize("phase", ["status", "body"])
def test_a_server_dripping_bytes_cannot_outlast_the_timeout(allow_local, phase):
    drip = Drip(phase, every=0.5)
    try:
        t0 = time.monotonic()
        with pytest.raises(CallbackFailed, match="no answer within 1s"):
            post_json(drip.url, {}, timeout=1)
        elapsed = time.monotonic() - t0
    finally:
        _stop(drip.server)
    assert 0.9 <= elapsed < 3.0, elapsed  # the deadline, with room for a loaded machine


def test_a_large_answer_is_read_in_part_and_kept_short(upstream, allow_local):
    upstream.answer_size = 5 * 1024 * 1024
    out = post_json(upstream.url, {}, timeout=10)
    assert out["status"] == 200 and out["body"] == "x" * RESULT_BODY_CHARS


def test_dns_answer_is_resolved_once_and_the_vetted_address_is_used(upstream, allow_local,
                                                                   monkeypatch):
    # A rebinding resolver: the allowed test server on the first lookup, another address
    # on any later one. The standard library's resolver function is replaced (no Redis
    # or ORM involved): only the first answer may be used, and the connection must go
    # where it pointed, with the URL's name in the Host header.
    answers = iter(["127.0.0.1", "10.255.255.1"])
    real = socket.getaddrinfo

    def rebinding(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        if host == "hooks.rebind.example":
            return real(next(answers), port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    out = post_json("http://hooks.rebind.example:%d/hook" % upstream.port, {}, timeout=5)
    assert out["status"] == 200
    (req,) = upstream.requests
    assert req["headers"]["Host"] == "hooks.rebind.example:%d" % upstream.port
    assert next(answers) == "10.255.255.1"  # the second answer was never asked for


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_https_checks_the_urls_name_while_connecting_to_the_vetted_address(
        upstream, allow_local, tmp_path, monkeypatch):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    names: list[str | None] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    def remember_sni(sock: Any, name: str | None, ctx: Any) -> None:
        names.append(name)

    context.sni_callback = remember_sni
    upstream.server.socket = context.wrap_socket(upstream.server.socket, server_side=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust the test certificate only
    out = post_json("https://localhost:%d/hook" % upstream.port, {"tls": True}, timeout=5)
    assert out["status"] == 200 and names == ["localhost"]
    assert upstream.requests[0]["headers"]["Host"] == "localhost:%d" % upstream.port
    with pytest.raises(CallbackFailed, match="CERTIFICATE_VERIFY_FAILED"):
        post_json("https://127.0.0.1:%d/hook" % upstream.port, {}, timeout=5)  # not its name
    assert len(upstream.requests) == 1


@pytest.mark.django_db
def test_scheduled_callback_500_then_200_retries_on_the_backoff(delayq_settings, delayq,  # noqa: F811
                                                               upstream, allow_local):
    upstream.script = [(500, 0.0), (200, 0.0)]
    handle = schedule(PATH, upstream.url, {"order": 7}, backoff=UPSTREAM_BACKOFF)
    job = Job.objects.get(pk=handle.id)
    assert job.max_attempts == len(UPSTREAM_BACKOFF) + 1 == 10
    assert delayq.run_due_jobs() == 1
    job.refresh_from_db()
    assert job.status == "retrying" and "answered 500" in job.last_error
    (failed,) = JobAttempt.objects.filter(job_id=handle.id)
    # the first retry's delay, from the test clock's reading (in whole ms) when the failure
    # was settled: a moment after the attempt's end on a busy machine, or in the same ms
    delay = job.run_at - failed.finished_at
    assert timedelta(seconds=15) - timedelta(milliseconds=1) < delay < timedelta(seconds=17)
    # not due 5 s on (real time passes between the steps on a busy machine: a margin)
    assert delayq.advance(timedelta(seconds=5)) == 0
    assert delayq.advance(timedelta(seconds=11)) == 1
    job.refresh_from_db()
    assert job.status == "succeeded" and job.attempts == 2
    assert job.result == {"status": 200, "body": '{"got": 2}'}
    assert [r["headers"]["X-DelayQ-Attempt"] for r in upstream.requests] == ["1", "2"]
    assert {r["headers"]["Idempotency-Key"] for r in upstream.requests} == {handle.id}
    (attempt,) = JobAttempt.objects.filter(job_id=handle.id)
    assert attempt.error.startswith("POST %s answered 500" % upstream.url)
    assert attempt.error_type == "django_delayq.contrib.http.CallbackFailed"


@pytest.mark.django_db
def test_scheduled_callback_that_times_out_is_retried(delayq_settings, delayq, upstream,  # noqa: F811
                                                      allow_local):
    upstream.script = [(200, 1.0)]
    handle = job_of(PATH).using(backoff=[60]).schedule(upstream.url, {"n": 1}, timeout=0.2)
    assert delayq.run_due_jobs() == 1
    job = Job.objects.get(pk=handle.id)
    assert job.status == "retrying" and "no answer within 0.2s" in job.last_error
    assert delayq.advance(61) == 1
    job.refresh_from_db()
    assert job.status == "succeeded"


@pytest.mark.django_db
def test_scheduled_callback_to_the_metadata_service_is_dead_at_once(delayq_settings, delayq,  # noqa: F811
                                                                    refuse_local):
    handle = schedule(PATH, "http://169.254.169.254/latest/meta-data/", {},
                      backoff=UPSTREAM_BACKOFF)
    assert delayq.run_due_jobs() == 1
    job = Job.objects.get(pk=handle.id)
    assert job.status == "dead" and job.attempts == 1
    assert job.error_type == "django_delayq.contrib.http.CallbackRefused"
    assert "169.254.169.254 is link-local" in job.last_error
    assert job.result is None


@pytest.mark.parametrize("url, why", [
    ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local"),
    ("https://user:hunter2@partner.example/hook", "post_json refuses a URL with credentials"),
    ("ftp://partner.example/hook", "post_json needs an http:// or https:// URL"),
    ("http://partner.example:99999/hook", "post_json: bad port"),
    ("http://partner.example/a hook", "spaces or control characters"),
    ("http://partner.example/hook\r\nX-Injected: 1", "spaces or control characters"),
    (" http://partner.example/hook", "spaces or control characters"),
    ("http://partner.example/a\u2028hook", "spaces or control characters (U+2028)"),
    ("http://partner.example/a\x85hook", "spaces or control characters (U+0085)"),
    ("http://partner.example/a\xa0hook", "spaces or control characters (U+00A0)"),
    ("http://straße.example/hook", "write it in its xn-- form"),
    (5, "post_json needs an http:// or https:// URL, not 5"),
])
@pytest.mark.django_db
def test_a_refused_url_leaves_not_allowed_in_the_audit_row(delayq_settings, delayq,  # noqa: F811
                                                           refuse_local, url, why):
    """docs/http-callbacks.md: dead at once, ``not allowed: …`` in its audit row."""
    handle = schedule(PATH, url, {}, backoff=UPSTREAM_BACKOFF)
    assert delayq.run_due_jobs() == 1
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.attempts) == ("dead", 1), job.last_error
    assert job.last_error.startswith("not allowed: "), job.last_error
    assert why in job.last_error and "hunter2" not in job.last_error


def test_a_refusal_copied_or_pickled_keeps_one_prefix() -> None:
    import copy
    import pickle

    from django_delayq.contrib.http import CallbackRefused
    refused = CallbackRefused("x")
    assert str(refused) == str(copy.copy(refused)) == str(pickle.loads(pickle.dumps(refused))) \
        == "not allowed: x"


def test_listing_the_module_makes_post_json_its_only_job(refuse_local) -> None:  # type: ignore[no-untyped-def]
    """Every public function of an allowed module can be scheduled (docs/settings.md):
    the module's helpers are private, so listing it exposes ``post_json`` alone."""
    import inspect

    from django_delayq import InvalidJob
    from django_delayq.contrib import http
    public = [name for name, value in vars(http).items() if inspect.isfunction(value)
              and value.__module__ == MODULE and not name.startswith("_")]
    assert public == ["post_json"]
    for name in ("_refusal", "_vetted_addresses", "_exchange"):
        with pytest.raises(InvalidJob, match=name):
            schedule(f"{MODULE}.{name}", "127.0.0.1")
