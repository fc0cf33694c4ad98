"""A TCP proxy on loopback that can make its target unreachable (the chaos run's database
outage on PostgreSQL; modelled on ``tests/reliability/proxy.py``).

Workers connect to the proxy's port; it forwards bytes both ways. ``cut()`` resets every
open connection and, until ``restore()``, resets each new one as soon as it is accepted
(the client sees its connection refused or reset, as behind a dead database host).
"""

from __future__ import annotations

import socket
import struct
import threading


def _reset(sock: socket.socket) -> None:
    """Close with a RST (SO_LINGER 0), not a FIN: the peer sees the connection reset. The
    shutdown first wakes a thread blocked reading it (a bare close would not: the
    connection would stay open, silent, while that read lasts)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.down = threading.Event()
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self.accepted = self.refused = self.cut_open = 0
        threading.Thread(target=self._accept, name="chaos-proxy", daemon=True).start()

    def cut(self) -> None:
        self.down.set()
        with self._lock:
            socks, self._open = list(self._open), set()
        self.cut_open += len(socks) // 2
        for s in socks:
            _reset(s)

    def restore(self) -> None:
        self.down.clear()

    def close(self) -> None:
        self.listener.close()
        self.cut()

    def _accept(self) -> None:
        while True:  # ends when close() closes the listener
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down.is_set():
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            self.accepted += 1
            with self._lock:
                self._open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):  # until either side (or cut()) closes
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            mine = src in self._open
            self._open.discard(src)
            self._open.discard(dst)
        if mine:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
