"""Acks sent as jobs finish, their replies read in order by one reader.

``Engine.ack`` sends a script call and waits for its reply. On a worker's job thread that
wait is expensive: the reply arrives in a fraction of a millisecond, but the thread then
waits for the interpreter lock, behind every other busy thread, for up to several
milliseconds per job. An ``AckStream`` splits the call: ``send`` writes the ack on a
connection of its own at once (it reaches Redis while the sending thread still holds the
interpreter) and returns; ``read`` (one reader thread) takes the replies in the order
the requests were written (Redis answers a connection's commands in order).

Only a plain client (one server: standalone or behind Sentinel) has one connection to
write to; ``Engine.ack_stream`` returns None for a cluster, whose callers use ``ack``.
A request whose fate is unknown (the connection failed) is reported lost; its caller
settles it again through ``ack``, which tells an ack that ran from one that did not (the
token is gone from ``inflight`` either way: see worker/settle.py).

The start marks (``mark``: lua/mark.lua for one job, written before its function is
called) go on a second connection told ``CLIENT REPLY OFF``: written and never answered,
nothing to read (and nothing unread when the process is killed, which would make the
kernel reset the connection and drop what was still to be sent). They are written with
``MSG_MORE``: the kernel may hold them back and send several in one segment (a segment
per job start costs a no-op drain a quarter of its throughput on loopback); when the
process dies its sockets are closed and what the kernel held is sent. A mark
is a hint for recovery (lua/recover.lua): one that never arrives makes a run of a killed
worker look unstarted, so it is not charged an attempt.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis import ConnectionPool, Redis
from redis.connection import Connection
from redis.exceptions import ResponseError

from django_delayq.engine import scripts
from django_delayq.engine.resp import bulk, command, own_connection

if TYPE_CHECKING:
    from django_delayq.engine.keys import QueueKeys


def _libc_send() -> Any:
    """libc's ``send``, called without releasing the interpreter lock (``PyDLL``); None
    where there is none (not POSIX)."""
    try:
        fn = ctypes.PyDLL(None).send
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int)
    fn.restype = ctypes.c_ssize_t
    return fn


_SEND = _libc_send()
# plain ints: the flags are enum members, whose ``|`` runs Python code on every write
_FLAGS = int(getattr(socket, "MSG_DONTWAIT", 0)) | int(getattr(socket, "MSG_NOSIGNAL", 0))
_MORE = int(getattr(socket, "MSG_MORE", 0))  # more follows: the kernel may hold it (corked)


def _write(conn: Connection, data: bytes, more: bool = False) -> None:
    """Write ``data`` to ``conn``'s socket. On a plain socket (not TLS) whose buffer takes
    it at once, libc's ``send`` writes it while this thread keeps the interpreter lock:
    a socket call through Python would let go of the lock, and getting it back on a busy
    worker takes milliseconds, during which no other ack could be written. Whatever is
    left is written the usual way."""
    sock = conn._sock  # redis-py's connected socket
    if sock is None:
        raise ConnectionError("not connected")
    done = 0
    if _SEND is not None and _FLAGS and type(sock) is socket.socket:
        done = max(0, _SEND(sock.fileno(), data, len(data), _FLAGS | _MORE if more else _FLAGS))
    if done < len(data):
        sock.sendall(data[done:])


def _cork(conn: object) -> None:
    """Let the kernel hold what is written to ``conn`` until a segment is full, at most
    200 ms (``TCP_CORK``; a process killed meanwhile has its sockets closed, and what was
    held is sent). Where there is no such option, nothing changes."""
    sock = getattr(conn, "_sock", None)
    cork = getattr(socket, "TCP_CORK", None)
    if sock is not None and cork is not None and sock.family in (socket.AF_INET,
                                                                  socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, cork, 1)


def plain_sockets(pool: ConnectionPool) -> bool:
    """Whether the pool's connections are plain sockets (TCP or unix): a TLS socket must
    not be read and written from two threads at once (OpenSSL)."""
    kind = getattr(pool, "connection_class", None)
    return kind is not None and "ssl" not in kind.__name__.lower()


def _leases(leases: Sequence[tuple[str, int]], codes: Sequence[str]) -> bytes:
    """An ack's triples (id, token, code) as bulk strings (a job thread's path: one
    format per lease)."""
    out = []
    for (job_id, token), code in zip(leases, codes):
        raw, tok, c = job_id.encode(), b"%d" % token, code.encode()
        out.append(b"$%d\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (
            len(raw), raw, len(tok), tok, len(c), c))
    return b"".join(out)


@dataclass(frozen=True, slots=True)
class AckReply:
    """The reply to one ``send``: its ``tag``, one bool per lease (acked, or refused:
    lease lost), or ``error`` (the ack's fate is unknown: settle it again)."""

    tag: Any
    acked: list[bool]
    error: Exception | None = None


class AckStream:
    def __init__(self, client: Redis, keys: Callable[[str], QueueKeys], holder: str,
                 covers: Callable[[str], bool] | None = None) -> None:
        self._client = client
        self._keys = keys  # queue -> QueueKeys
        # queue -> whether its jobs are all under keys(queue) (not a sharded queue)
        self.covers = covers or (lambda queue: True)
        self._holder = holder
        self._script = scripts.load("ack")
        self._mark = scripts.load("mark")
        self._conn: Any = None
        self._lock = threading.Lock()  # one writer at a time: the order of ``_sent``
        # (tag, leases) of the requests in flight, in the order they were written
        self._sent: deque[tuple[Any, int]] = deque()
        self._stale = False  # an error reply came (NOSCRIPT, READONLY): reconnect when idle
        self._ready = threading.Condition(threading.Lock())
        self._marks: Any = None  # the marks' connection (CLIENT REPLY OFF)
        self._marks_lock = threading.Lock()
        # (keys, number of args) -> the start of a mark's command, written once
        self._mark_heads: dict[tuple[tuple[str, ...], int], bytes] = {}
        # queue -> (parts before the leases, those parts written) of its acks
        self._ack_heads: dict[str, tuple[int, bytes]] = {}

    def send(self, queue: str, leases: Sequence[tuple[str, int]], codes: Sequence[str],
             tag: object) -> bool:
        """Write an ack of ``leases`` (at most ``scripts.MAX_ACK``); False when it could not
        be written (settle them through ``Engine.ack``: whether a part reached Redis is
        unknown, and ``Engine.ack`` tells). A failed write closes the connection, so the
        requests in flight are reported lost too (a partial command must never be followed
        by another on the same connection)."""
        if 3 + 3 * len(leases) > self._script.bound.max_args:  # the callers split by MAX_ACK
            self._script.check(["0", self._holder, ""] + [""] * (3 * len(leases)))
        head = self._ack_heads.get(queue)
        try:
            if head is None:  # the parts before the leases: the same for every ack of queue
                keys = self._keys(queue)
                names = self._script.keys_of(keys)
                head = self._ack_heads[queue] = (len(names) + 6, bulk((
                    "EVALSHA", self._script.sha, len(names), *names, "0", self._holder,
                    keys.channel)))
            data = b"*%d\r\n%s%s" % (head[0] + 3 * len(leases), head[1],
                                        _leases(leases, codes))
        except UnicodeError:
            return False
        return self._put(data, tag, len(leases))

    def mark(self, keys: tuple[str, ...], args: list[str]) -> bool:
        """Write a start mark (lua/mark.lua; ``Engine.start_mark`` gives ``keys`` and
        ``args``) on the marks' connection, which Redis never answers; False when it could
        not be written (the caller marks it with a call)."""
        mark = self._mark
        head = self._mark_heads.get((keys, len(args)))
        try:
            if head is None:
                head = self._mark_heads[(keys, len(args))] = command(
                    "EVALSHA", mark.sha, len(keys), *keys, count=3 + len(keys) + len(args))
            data = head + bulk(args)
        except UnicodeError:
            return False
        with self._marks_lock:
            try:
                if self._marks is None:
                    self._marks = own_connection(self._client.connection_pool)
                    self._marks.connect()
                    _cork(self._marks)
                    # the script loaded first, on the same connection: EVALSHA finds it
                    _write(self._marks, command("CLIENT", "REPLY", "OFF") +
                           command("SCRIPT", "LOAD", mark.source))
                _write(self._marks, data, more=True)
            except Exception:  # noqa: BLE001 - the caller marks it with a call
                self._drop_marks()
                return False
        return True

    def _drop_marks(self) -> None:
        """Forget the marks' connection (the caller holds ``_marks_lock``)."""
        conn, self._marks = self._marks, None
        self._release(conn)

    def _put(self, data: bytes, tag: object, count: int) -> bool:
        with self._lock:
            try:
                if self._stale and not self._sent:  # an error reply came: start afresh
                    self._drop()
                if self._conn is None:
                    self._client.script_load(self._script.source)  # EVALSHA finds it
                    self._conn = own_connection(self._client.connection_pool)
                    self._conn.connect()
                    self._stale = False
                _write(self._conn, data)
            except Exception:  # noqa: BLE001 - the caller acks the usual way
                if self._sent:  # the reader's read fails and reports them lost
                    self._conn.disconnect()
                else:
                    self._drop()
                return False
            with self._ready:  # the reader waits on it only when nothing is in flight
                if not self._sent:
                    self._ready.notify()
                self._sent.append((tag, count))
        return True

    def read(self, timeout: float) -> list[AckReply]:
        """The next reply (the reader thread only), waiting up to ``timeout`` seconds for
        a request to be in flight, and those after it that have arrived too (one wake of
        the reader for several acks); [] when none is in flight. A failed connection
        answers every request in flight with an error. Never raises."""
        replies = self._read_one(timeout)
        while replies and replies[-1].error is None and self._arrived():
            replies += self._read_one(0)
        return replies

    def _arrived(self) -> bool:
        """Whether the reply of the next request in flight can be read without waiting
        (the parser's check: a dropped connection is never connected again here)."""
        with self._ready:
            conn = self._conn if self._sent else None
        try:
            return conn is not None and bool(conn._parser.can_read(0))
        except Exception:  # noqa: BLE001 - the next read reports it
            return False

    def _read_one(self, timeout: float) -> list[AckReply]:
        with self._ready:
            if not self._sent:
                self._ready.wait(timeout)
            if not self._sent:
                return []
            (tag, count), conn = self._sent[0], self._conn
        try:
            reply = conn.read_response()
        except ResponseError as exc:  # an error reply (NOSCRIPT, READONLY, ...): its own
            with self._ready:
                self._sent.popleft()
            self._stale = True
            return [AckReply(tag, [], exc)]
        except Exception as exc:  # noqa: BLE001 - every request in flight is in doubt
            with self._lock:
                with self._ready:
                    lost = list(self._sent)
                    self._sent.clear()
                self._drop()
            return [AckReply(t, [], exc) for t, _ in lost]
        with self._ready:
            self._sent.popleft()
        try:
            acked = [bool(int(r)) for r in reply]
        except (TypeError, ValueError) as exc:
            return [AckReply(tag, [], exc)]
        if len(acked) != count:
            return [AckReply(tag, [], ValueError("%d replies for %d leases" % (
                len(acked), count)))]
        return [AckReply(tag, acked)]

    def in_flight(self) -> int:
        with self._ready:
            return len(self._sent)

    def close(self) -> None:
        with self._lock:
            self._drop()
        with self._marks_lock:
            self._drop_marks()

    def _drop(self) -> None:
        """Forget the connection (the caller holds ``_lock``); the next send opens one."""
        conn, self._conn = self._conn, None
        self._release(conn)

    def _release(self, conn: Connection | None) -> None:
        """Close ``conn`` (if any) and give it back to the pool."""
        if conn is not None:
            try:
                conn.disconnect()
            finally:
                self._client.connection_pool.release(conn)
