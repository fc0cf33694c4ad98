"""What ``post_json`` sends of the headers and URL it is given, read off the wire.

A raw socket server on 127.0.0.1 keeps each request's bytes as they arrived (an HTTP
server's parsed headers would hide a header sent twice in two letter cases). Refused
headers and URLs must never reach it: the tests count its accepted connections.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from django_delayq import job as job_of
from django_delayq.contrib.http import CallbackFailed, CallbackRefused, post_json
from django_delayq.models import Job
from django_delayq.pytest_plugin import delayq  # noqa: F401  (the fixture under test)

PATH = "django_delayq.contrib.http.post_json"


class RawUpstream:
    """Accepts connections, keeps each request's raw bytes, answers ``200 {}``."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.connections = 0
        self.stopped = False
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            if self.stopped:
                conn.close()
                return
            self.connections += 1
            with conn:
                conn.settimeout(10)
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = sum(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                             if line.lower().startswith(b"content-length:"))
                while len(body) < length and (chunk := conn.recv(65536)):
                    body += chunk
                self.requests.append(head)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    def stop(self) -> None:
        self.stopped = True
        socket.create_connection(("127.0.0.1", self.port), timeout=10).close()  # wakes accept
        self.thread.join(timeout=10)
        self.sock.close()

    def request_line(self) -> str:
        return self.requests[-1].split(b"\r\n", 1)[0].decode("ascii")

    def headers(self, name: str) -> list[tuple[str, str]]:
        """Every header of the last request named ``name`` in any letter case, as sent."""
        lines = self.requests[-1].decode("latin-1").split("\r\n")[1:]
        pairs = [(n, v.strip()) for n, v in (line.split(":", 1) for line in lines)]
        return [(n, v) for n, v in pairs if n.lower() == name.lower()]


@pytest.fixture
def raw() -> Iterator[RawUpstream]:
    server = RawUpstream()
    yield server
    server.stop()


@pytest.fixture
def allow_local(settings):  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "HTTP_CALLBACK_ALLOWED_NETWORKS": ["127.0.0.1/32"]}
    return settings


def test_a_passed_header_replaces_the_default_of_its_name_in_any_case(raw, allow_local):
    out = post_json(raw.url + "/hook", {}, headers={"content-type": "text/plain",
                                                   "USER-AGENT": "me", "X-Token": "t"})
    assert out["status"] == 200
    assert raw.headers("Content-Type") == [("content-type", "text/plain")]
    assert raw.headers("User-Agent") == [("USER-AGENT", "me")]
    assert raw.headers("X-Token") == [("X-Token", "t")]


@pytest.mark.django_db
def test_a_job_passing_idempotency_key_in_lower_case_sends_it_once(delayq_settings, delayq,  # noqa: F811
                                                                   raw, allow_local):
    handle = job_of(PATH).schedule(raw.url + "/hook", {}, headers={
        "idempotency-key": "mine", "content-type": "text/plain"})
    assert delayq.run_due_jobs() == 1
    assert Job.objects.get(pk=handle.id).status == "succeeded"
    assert raw.headers("Idempotency-Key") == [("idempotency-key", "mine")]
    assert raw.headers("Content-Type") == [("content-type", "text/plain")]
    assert raw.headers("X-DelayQ-Attempt") == [("X-DelayQ-Attempt", "1")]


def test_two_passed_headers_differing_only_in_case_are_refused(raw, allow_local):
    with pytest.raises(CallbackRefused, match="'X-Token' and 'x-token' differ only in letter"):
        post_json(raw.url, {}, headers={"X-Token": "a", "x-token": "b"})
    assert raw.connections == 0


@pytest.mark.parametrize("headers, why", [
    ({"Authorization": "Bearer hunter2\r\nX-Injected: 1"}, "header Authorization holds U+000D"),
    ({"X-A": "v\nX-Injected: 1"}, "holds U+000A"),
    ({"X-A": "v\r\n folded"}, "holds U+000D"),  # obs-fold: http.client sends it
    ({"X-A": "v\x00"}, "holds U+0000"),
    ({"X-A": "v\x7f"}, "holds U+007F"),
    ({"X-A": "v\x85"}, "holds U+0085"),
    ({"X-A": "\u2603"}, "beyond Latin-1"),  # would fail to encode, retried
    ({"X-A\r\nX-Injected": "1"}, "is no header name"),
    ({"X-\x01": "1"}, "is no header name"),  # http.client sends it
    ({"X A": "1"}, "is no header name"),
    ({"X-A:": "1"}, "is no header name"),
    ({"": "1"}, "is no header name"),
    ({"Content-Length": "1"}, "sets Content-Length from the body"),
    ({"transfer-encoding": "chunked"}, "sets transfer-encoding from the body"),
    ({"X-A": b"v"}, "needs a str value, not a bytes"),
    ([("Authorization", "hunter2")], "headers must be a dict of names to values, not a list"),
])
def test_a_header_that_may_not_be_sent_is_refused_before_connecting(raw, allow_local,
                                                                     headers, why):
    with pytest.raises(CallbackRefused, match="not allowed: post_json") as info:
        post_json(raw.url, {}, headers=headers)
    assert why in str(info.value) and "hunter2" not in str(info.value)
    assert raw.connections == 0


def test_int_and_latin_1_header_values_are_still_sent(raw, allow_local):
    post_json(raw.url, {}, headers={"X-Count": 3, "X-Name": "caf\xe9\tx"})
    assert raw.headers("X-Count") == [("X-Count", "3")]
    assert raw.requests[-1].split(b"\r\n").count(b"X-Name: caf\xe9\tx") == 1


def test_a_non_ascii_path_and_query_are_percent_encoded(raw, allow_local):
    assert post_json(raw.url + "/café/ü?q=é&x=%C3%A9", {})["status"] == 200
    assert raw.request_line() == "POST /caf%C3%A9/%C3%BC?q=%C3%A9&x=%C3%A9 HTTP/1.1"


@pytest.mark.parametrize("char", ["\x85", "\xa0", "\u2028", "\u2029", "\u200b", "\ufeff",
                                  "\u3000", "\ud800"])
@pytest.mark.parametrize("where", ["host", "path", "query"])
def test_unicode_spaces_and_controls_are_refused_before_connecting(raw, allow_local, char,
                                                                   where):
    url = {"host": "http://127.0.0.1%s:%d/" % (char, raw.port),
           "path": raw.url + "/a%sb" % char, "query": raw.url + "/?a=%sb" % char}[where]
    with pytest.raises(CallbackRefused, match="spaces or control characters \\(U\\+%04X\\)"
                       % ord(char)):
        post_json(url, {})
    assert raw.connections == 0


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names asked of the resolver; any name under .example is this host (127.0.0.1)."""
    asked: list[str] = []
    real = socket.getaddrinfo

    def local(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        asked.append(host)
        return real("127.0.0.1" if host.endswith(".example") else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local)
    return asked


def test_a_non_ascii_host_is_sent_in_its_idna_form(raw, allow_local, resolver):
    url = "http://Bücher.example:%d/hook" % raw.port
    assert post_json(url, {})["status"] == 200
    assert resolver == ["xn--bcher-kva.example"]
    assert raw.headers("Host") == [("Host", "xn--bcher-kva.example:%d" % raw.port)]


@pytest.mark.parametrize("host, why", [
    ("straße.example", "IDNA would change 'straße'"),  # IDNA 2003 maps it to strasse
    ("\uff41bc.example", "IDNA would change"),  # fullwidth a
    ("a\u3002b.example", "IDNA would change"),  # ideographic full stop
    ("\ufb01.example", "IDNA would change"),  # the fi ligature
    ("a\uff03b", "is no URL"),  # a '#' under NFKC: urlsplit raises ValueError
])
def test_a_host_idna_would_change_is_refused_before_any_lookup(raw, allow_local, resolver,
                                                               host, why):
    with pytest.raises(CallbackRefused, match="not allowed: post_json") as info:
        post_json("http://%s:%d/hook" % (host, raw.port), {})
    assert why in str(info.value)
    assert resolver == [] and raw.connections == 0


@pytest.mark.django_db
def test_a_job_to_a_non_ascii_url_succeeds_at_once(delayq_settings, delayq, raw,  # noqa: F811
                                                   allow_local):
    handle = job_of(PATH).schedule(raw.url + "/café", {"n": 1})
    assert delayq.run_due_jobs() == 1
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.attempts) == ("succeeded", 1), job.last_error
    assert raw.request_line() == "POST /caf%C3%A9 HTTP/1.1"


@pytest.mark.parametrize("options, why", [
    ({"expected": "200"}, "expected must be a status"),  # its characters, never a status
    ({"expected": ["200"]}, "expected must be a status"),
    ({"expected": True}, "expected must be a status"),
    ({"expected": 2000}, "expected must be a status"),
    ({"expected": [200, 99]}, "expected must be a status"),
    ({"expected": []}, "expected must be a status"),
    ({"expected": 200.0}, "expected must be a status"),
    ({"timeout": 0}, "timeout must be a number of seconds"),
    ({"timeout": -1}, "timeout must be a number of seconds"),
    ({"timeout": float("nan")}, "timeout must be a number of seconds"),
    ({"timeout": float("inf")}, "timeout must be a number of seconds"),
    ({"timeout": 1e300}, "timeout must be a number of seconds"),
    ({"timeout": "10"}, "timeout must be a number of seconds"),
    ({"timeout": True}, "timeout must be a number of seconds"),
])
def test_a_bad_expected_or_timeout_is_refused_before_connecting(raw, allow_local, options,
                                                                 why):
    with pytest.raises(CallbackRefused, match="not allowed: post_json") as info:
        post_json(raw.url, {}, **options)
    assert why in str(info.value)
    assert raw.connections == 0


def test_expected_statuses_as_an_int_or_a_list_are_still_checked(raw, allow_local):
    assert post_json(raw.url, {}, expected=200)["status"] == 200
    assert post_json(raw.url, {}, expected=[201, 200], timeout=5)["status"] == 200
    with pytest.raises(CallbackFailed, match="answered 200"):
        post_json(raw.url, {}, expected=(201,))
    assert raw.connections == 3


@pytest.mark.parametrize("options", [{"expected": "200"}, {"timeout": 0}, {"timeout": -1}])
@pytest.mark.django_db
def test_a_job_with_a_bad_expected_or_timeout_is_dead_at_once(delayq_settings, delayq,  # noqa: F811
                                                              raw, allow_local, options):
    """Not retried: each attempt would POST, count as failed and be retried."""
    handle = job_of(PATH).using(max_attempts=3).schedule(raw.url, {}, **options)
    assert delayq.run_due_jobs() == 1
    job = Job.objects.get(pk=handle.id)
    assert (job.status, job.attempts) == ("dead", 1), job.last_error
    assert job.last_error.startswith("not allowed: post_json"), job.last_error
    assert raw.connections == 0
