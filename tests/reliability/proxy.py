"""A TCP proxy in front of a real redis-server that can lose one reply.

``drop_reply_to(marker)``: the next request containing ``marker`` is forwarded (Redis
runs it) but its reply is swallowed and the client's connection is closed: the client
sees a reset after the server acted, the fault a network partition produces.
``cut()``: every connection reset, new ones refused, until ``restore()``: a partition of
the one client behind the proxy (the others reach Redis directly).
"""

from __future__ import annotations

import contextlib
import socket
import threading


class LossyProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._marker: bytes | None = None
        self._lock = threading.Lock()
        self.dropped = 0
        self._cut = False
        self._open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return "redis://127.0.0.1:%d/0" % self.port

    def drop_reply_to(self, marker: bytes) -> None:
        with self._lock:
            self._marker = marker

    def close(self) -> None:
        self.listener.close()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets, self._open = list(self._open), set()
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                refused = self._cut
            if refused:
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            with self._lock:
                self._open |= {client, upstream}
            drop = threading.Event()
            threading.Thread(target=self._up, args=(client, upstream, drop), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, drop),
                             daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, drop: threading.Event) -> None:
        try:
            while data := client.recv(65536):
                with self._lock:
                    if self._marker is not None and self._marker in data:
                        self._marker = None
                        drop.set()
                upstream.sendall(data)
        except OSError:
            pass

    def _down(self, upstream: socket.socket, client: socket.socket,
              drop: threading.Event) -> None:
        try:
            while data := upstream.recv(65536):
                if drop.is_set():
                    self.dropped += 1
                    break
                client.sendall(data)
        except OSError:
            pass
        for s in (client, upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
