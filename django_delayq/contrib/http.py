"""HTTP callback jobs: ``post_json(url, body)`` succeeds on a 2xx answer and raises on
anything else (another status, a timeout, a refused connection), so the job's retry
and backoff policy applies. Standard library only (``http.client``)::

    schedule("django_delayq.contrib.http.post_json", url, {"order": 42, "paid": True},
             backoff=UPSTREAM_BACKOFF)   # 15s 3m 10m 30m 30m 1h 2h 6h 15h, then dead

Redirects are not followed (a 3xx is a failure: a POST must not silently become a
GET). Each request carries ``Idempotency-Key: <job id>`` and ``X-DelayQ-Attempt``, so
the receiver can drop the duplicate an at-least-once delivery may produce.

A callback URL often comes from someone else (a partner's webhook setting), so the
destination is vetted before any connection. The host is resolved once
(``getaddrinfo``, which also reads ``2130706433`` or ``0x7f.1`` as the loopback address
they are); an address that is loopback, private, link-local, multicast, reserved,
unspecified or otherwise not public (IPv4-mapped IPv6 addresses are judged by their
IPv4 address) is refused unless a network of
``DELAYQ["HTTP_CALLBACK_ALLOWED_NETWORKS"]`` contains it. The socket then connects to
that vetted address itself, while the ``Host`` header, TLS SNI and certificate check use
the URL's host name: a DNS answer that changes between the check and the connection
(rebinding) changes nothing. A URL that is not a string, or holds a space, a control or
a format character (Unicode categories Zs, Zl, Zp, Cc, Cf, Cs: U+0085, U+00A0, U+2028,
U+200B...), is refused too. Other non-ASCII characters are sent as a browser sends
them: percent-encoded UTF-8 in the path and query, IDNA (``xn--``) in the host, unless
IDNA would map the host to another name (``straße`` to ``strasse``). A header is sent
as passed, replacing a default of the same name in any letter case; a header name that
is no HTTP token, a value with a control character (CR, LF, NUL) or beyond Latin-1, two
passed names differing only in case, or ``Content-Length`` / ``Transfer-Encoding`` (set
from the body) are refused. A refused URL or header raises
``CallbackRefused``, a ``PermissionError``, before any lookup or connection, so the job is
dead at once ("not allowed: ...") instead of being retried for hours; so do a ``timeout``
that is no number of seconds > 0 (at most ``MAX_TIMEOUT_SECONDS``) and an ``expected``
that is no status from 100 to 599 or non-empty list of them (``"200"`` would match no
status: each attempt would POST, then fail).

``timeout`` bounds the whole call: name resolution, connect, TLS handshake, sending,
status line, headers and body. Every socket operation gets the time left before one
monotonic deadline, and every read checks it first, so a server sending a byte at a
time cannot hold a worker thread past ``timeout``. At most ``MAX_BODY_BYTES`` of the
answer are read and ``RESULT_BODY_CHARS`` kept in the job's result.
"""

from __future__ import annotations

import io
import ipaddress
import json
import logging
import re
import socket
import ssl
import time
import unicodedata
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection, HTTPException, HTTPResponse
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, quote, urlsplit

from django_delayq.core.conf import get_settings
from django_delayq.core.context import current_job
from django_delayq.core.option_checks import MAX_TIMEOUT_SECONDS
from django_delayq.engine.logtext import shown
from django_delayq.exceptions import Refused

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

logger = logging.getLogger(__name__)

UPSTREAM_BACKOFF = [15, 180, 600, 1800, 1800, 3600, 7200, 21600, 54000]
DEFAULT_TIMEOUT = 10.0
MAX_BODY_BYTES = 64 * 1024  # of the answer read back; the rest is never read
RESULT_BODY_CHARS = 1000  # of the answer kept in the job's result
RESOLVER_THREADS = 4
DEFAULT_PORTS = {"http": 80, "https": 443}
# never sent in a URL: spaces, line and paragraph separators, control, format and surrogate
REFUSED_URL_CATEGORIES = frozenset({"Zs", "Zl", "Zp", "Cc", "Cf", "Cs"})
VISIBLE_ASCII = "".join(map(chr, range(0x21, 0x7F)))  # kept as written in a path or query
# a header name: one or more ASCII letters, digits or !#$%&'*+-.^_`|~ (no space, colon,
# separator or control character)
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
BODY_HEADERS = frozenset({"content-length", "transfer-encoding"})  # set from the body

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SockAddr = tuple[socket.AddressFamily, tuple[Any, ...]]


class CallbackFailed(Exception):
    """The callback did not answer with an expected status (``status`` None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class CallbackRefused(Refused, ValueError):
    """The URL is not one ``post_json`` may call: not http(s), credentials, spaces or
    control characters in it, or a host whose addresses are not public (and not allowed by
    ``DELAYQ["HTTP_CALLBACK_ALLOWED_NETWORKS"]``); or a header may not be sent, or a
    ``timeout`` or ``expected`` is bad (see the module docstring). No connection was made.
    Its message starts with ``not allowed:``, and so does the dead job's ``last_error``."""

    def __init__(self, why: str) -> None:  # once: a copy is made from the prefixed text
        super().__init__(why if why.startswith("not allowed: ") else "not allowed: " + why)


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; ``TimeoutError`` once the deadline has passed."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("deadline of %gs passed" % self.seconds)
        return left


# -- which addresses may be called ----------------------------------------------------

def _refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast address, or None when it is. An IPv6 address
    holding an IPv4 one (IPv4-mapped, or 6to4: 2002::/16, which Python calls global) is
    judged by that IPv4 address."""
    if isinstance(ip, ipaddress.IPv6Address):
        for form, inner in (("IPv4-mapped ", ip.ipv4_mapped), ("6to4 ", ip.sixtofour)):
            if inner is not None:
                why = _refusal(inner)
                return None if why is None else form + why
    for kind in ("unspecified", "loopback", "link_local", "multicast", "reserved", "private"):
        if getattr(ip, "is_" + kind):
            return kind.replace("_", "-")
    return None if ip.is_global else "not public"


def _is_allowed(ip: IPAddress, networks: Sequence[Any]) -> bool:
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return any(c in net for c in (ip, mapped) if c is not None for net in networks)


# one pool per process; its threads start with its first lookups, not at import
_resolver = ThreadPoolExecutor(RESOLVER_THREADS, thread_name_prefix="delayq-dns")


def _resolve(host: str, port: int, deadline: _Deadline) -> list[SockAddr]:
    """``getaddrinfo`` on a small thread pool, so the deadline covers a slow DNS answer."""
    future = _resolver.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM,
                              proto=socket.IPPROTO_TCP)
    infos = future.result(timeout=deadline.left())
    return [(family, sockaddr) for family, _type, _proto, _name, sockaddr in infos]


def _vetted_addresses(url: str, host: str, port: int, deadline: _Deadline) -> list[SockAddr]:
    """The resolved addresses of ``host`` that may be called, in resolver order;
    ``CallbackRefused`` naming each address and why when none may."""
    try:
        resolved = _resolve(host, port, deadline)
    except socket.gaierror as exc:
        raise CallbackFailed("POST %s: cannot resolve %r: %s" % (url, host, exc)) from exc
    networks = get_settings().http_callback_allowed_networks
    allowed, refused = [], []
    for family, sockaddr in resolved:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        why = _refusal(ip)
        if why is None or _is_allowed(ip, networks):
            allowed.append((family, sockaddr))
        else:
            refused.append("%s is %s" % (ip, why))
    if not allowed:
        raise CallbackRefused(
            "POST %s: %s resolves to addresses post_json does not call (%s); allow them with "
            "DELAYQ['HTTP_CALLBACK_ALLOWED_NETWORKS']" % (url, host, "; ".join(refused)))
    return allowed


# -- one request, bounded by the deadline ---------------------------------------------

class _DeadlineReader(io.RawIOBase):
    """The socket's reader, but every read first checks the deadline and may block only
    for the time left, so no sequence of slow reads outlasts it."""

    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: _Deadline) -> None:
        super().__init__()
        self._raw, self._sock, self._deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        self._sock.settimeout(self._deadline.left())
        return int(self._raw.readinto(buffer) or 0)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()  # releases the socket's file reference
        super().close()


def _response_class(deadline: _Deadline) -> type[HTTPResponse]:
    class Response(HTTPResponse):
        def __init__(self, sock: socket.socket, debuglevel: int = 0, method: str | None = None,
                     url: str | None = None) -> None:
            super().__init__(sock, debuglevel, method, url)
            raw = self.fp.detach()  # nothing read yet
            self.fp = io.BufferedReader(_DeadlineReader(raw, sock, deadline))

    return Response


class _Connection(HTTPConnection):
    """One connection to vetted addresses: ``host`` names the server (``Host`` header,
    TLS SNI and certificate check), the socket goes to one of ``addresses``."""

    def __init__(self, host: str, port: int, addresses: list[SockAddr], deadline: _Deadline,
                 tls: ssl.SSLContext | None) -> None:
        super().__init__(host, port, timeout=deadline.left())
        self.default_port = DEFAULT_PORTS["https" if tls else "http"]
        self.response_class = _response_class(deadline)
        self._addresses, self._deadline, self._tls = addresses, deadline, tls

    def connect(self) -> None:
        error: OSError | None = None
        for family, sockaddr in self._addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.settimeout(self._deadline.left())
                sock.connect(sockaddr)
            except OSError as exc:
                sock.close()
                if isinstance(exc, TimeoutError):
                    raise
                error = exc
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock.settimeout(self._deadline.left())  # the handshake's own deadline
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
            self.sock = sock
            return
        assert error is not None
        raise error

    def send(self, data: ReadableBuffer) -> None:  # type: ignore[override] # bytes here
        if self.sock is None:
            self.connect()
        view = memoryview(data).cast("B")
        sent = 0
        while sent < len(view):
            self.sock.settimeout(self._deadline.left())
            sent += self.sock.send(view[sent:])


def _ascii_host(url: str, host: str) -> str:
    """``host`` as sent: IDNA (``xn--``) for each non-ASCII label; ``CallbackRefused``
    when IDNA would turn a label into another name (``straße`` into ``strasse``)."""
    labels = []
    for label in host.split("."):
        try:
            encoded = label if label.isascii() else label.encode("idna").decode("ascii")
            same = encoded == label or encoded.encode("ascii").decode("idna") == label
        except UnicodeError:
            same = False
        if not same:
            raise CallbackRefused("post_json: the host of %r cannot be sent as written (IDNA "
                                  "would change %r); write it in its xn-- form" % (url, label))
        labels.append(encoded)
    return ".".join(labels)


def _target(url: str) -> tuple[SplitResult, str, int, str]:
    """The URL's parts, host and port as sent, and its path and query as sent (non-ASCII
    percent-encoded); ``CallbackRefused`` for what is never called."""
    if not isinstance(url, str):
        raise CallbackRefused("post_json needs an http:// or https:// URL, not %r" % (url,))
    bad = [c for c in url if unicodedata.category(c) in REFUSED_URL_CATEGORIES]
    if bad:  # never sent: urlsplit drops some
        raise CallbackRefused("post_json: a URL may not contain spaces or control "
                              "characters (U+%04X), not %r" % (ord(bad[0]), url))
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise CallbackRefused("post_json: %r is no URL: %s" % (url, exc)) from exc
    if parts.scheme not in DEFAULT_PORTS:
        raise CallbackRefused("post_json needs an http:// or https:// URL, not %r" % (url,))
    if parts.username is not None or parts.password is not None:
        raise CallbackRefused("post_json refuses a URL with credentials (user:password@host): "
                              "they would be stored and logged with the URL; send them in "
                              "headers")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError as exc:
        raise CallbackRefused("post_json: bad port in %r" % (url,)) from exc
    if not parts.hostname:
        raise CallbackRefused("post_json: no host in %r" % (url,))
    path = (parts.path or "/") + ("?" + parts.query if parts.query else "")
    return parts, _ascii_host(url, parts.hostname), port, quote(path, safe=VISIBLE_ASCII)


def _passed(headers: object) -> Iterator[tuple[str, str]]:
    """The headers passed, each checked; ``CallbackRefused`` naming one that may not be
    sent (its value is not shown: it may be a secret)."""
    if not isinstance(headers, Mapping):
        raise CallbackRefused("post_json: headers must be a dict of names to values, not a %s"
                              % type(headers).__name__)
    for name, given in headers.items():
        if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
            raise CallbackRefused("post_json: %r is no header name (letters, digits and "
                                  "!#$%%&'*+-.^_`|~ only)" % (name,))
        value = str(given) if isinstance(given, int) and not isinstance(given, bool) else given
        if not isinstance(value, str):
            raise CallbackRefused("post_json: header %s needs a str value, not a %s"
                                  % (name, type(value).__name__))
        bad = [c for c in value if not (c == "\t" or " " <= c <= "~" or "\xa0" <= c <= "\xff")]
        if bad:
            raise CallbackRefused("post_json: the value of header %s holds U+%04X: no control "
                                  "characters (CR, LF, NUL...) nor any beyond Latin-1"
                                  % (name, ord(bad[0])))
        if name.lower() in BODY_HEADERS:
            raise CallbackRefused("post_json sets %s from the body: do not pass it" % name)
        yield name, value


def _headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The defaults, each replaced by a passed header of the same name in any letter case,
    then the other passed headers; ``CallbackRefused`` for two passed names that differ
    only in case (which one was meant?)."""
    job = current_job()
    ids = {} if job is None else {"Idempotency-Key": job.id, "X-DelayQ-Attempt": str(job.attempt)}
    defaults = {"Content-Type": "application/json", "User-Agent": "django-delayq", **ids}
    sent = {name.lower(): (name, value) for name, value in defaults.items()}
    passed: dict[str, str] = {}
    for name, value in _passed({} if headers is None else headers):
        if name.lower() in passed:
            raise CallbackRefused("post_json: headers %r and %r differ only in letter case "
                                  "(HTTP names are case-insensitive); pass one"
                                  % (passed[name.lower()], name))
        passed[name.lower()] = name
        sent[name.lower()] = (name, value)
    return dict(sent.values())


def _exchange(url: str, body: bytes, headers: dict[str, str],
              deadline: _Deadline) -> tuple[int, bytes]:
    parts, host, port, path = _target(url)
    addresses = _vetted_addresses(url, host, port, deadline)
    tls = ssl.create_default_context() if parts.scheme == "https" else None
    conn = _Connection(host, port, addresses, deadline, tls)
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        try:
            return response.status, response.read(MAX_BODY_BYTES)  # each raw read: deadline
        finally:
            response.close()
    finally:
        conn.close()


def _seconds(timeout: object) -> float:
    """``timeout`` as a float; ``CallbackRefused`` unless a finite number of seconds > 0 and
    at most ``MAX_TIMEOUT_SECONDS`` (a job's own limit; a socket takes no more)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        raise CallbackRefused("post_json: timeout must be a number of seconds > 0 and at most "
                              "%d, not %r" % (MAX_TIMEOUT_SECONDS, timeout))
    return float(timeout)


def _statuses(expected: object) -> Container[int]:
    """The statuses that are success: any 2xx for None, else ``expected`` (one status or a
    list of them, each an int from 100 to 599); ``CallbackRefused`` for anything else (a
    string's characters would match no status: each attempt would POST and fail)."""
    if expected is None:
        return range(200, 300)
    given = [expected] if isinstance(expected, int) or not isinstance(expected, Iterable) \
        or isinstance(expected, (str, bytes, Mapping)) else list(expected)
    statuses = [s for s in given if isinstance(s, int) and not isinstance(s, bool)
                and 100 <= s <= 599]
    if not given or len(statuses) < len(given):
        raise CallbackRefused("post_json: expected must be a status (an int from 100 to 599) "
                              "or a non-empty list of them, not %r" % (expected,))
    return frozenset(statuses)


def post_json(url: str, body: object = None, *, timeout: float = DEFAULT_TIMEOUT,
              headers: Mapping[str, str] | None = None,
              expected: int | Iterable[int] | None = None) -> dict[str, Any]:
    """POST ``body`` as JSON to ``url``; return ``{"status", "body"}`` on an expected
    status (default: any 2xx), else raise ``CallbackFailed`` (the job is retried).
    ``timeout`` bounds the whole call; a URL that may not be called, or a bad ``timeout``
    or ``expected``, raises ``CallbackRefused`` before any connection (see the module
    docstring)."""
    statuses = _statuses(expected)
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    deadline = _Deadline(_seconds(timeout))
    try:
        status, raw = _exchange(url, data, _headers(headers), deadline)
    except (CallbackFailed, CallbackRefused):
        raise
    except TimeoutError as exc:
        raise CallbackFailed("POST %s: no answer within %ss" % (url, timeout)) from exc
    except (OSError, HTTPException) as exc:
        raise CallbackFailed("POST %s: %s" % (url, exc or type(exc).__name__)) from exc
    text = raw.decode("utf-8", errors="replace")
    if status not in statuses:
        raise CallbackFailed("POST %s answered %d: %s" % (url, status, text[:200]), status)
    logger.debug("POST %s answered %d", shown(url), status)
    return {"status": status, "body": text[:RESULT_BODY_CHARS]}
