"""The signal relay: SIGTERM, SIGINT and a supervised child's ``ORPHAN_SIGNAL`` acted on
by a thread of their own (``delayq-signals``), never in a Python signal handler.

**Why not act in the handler.** CPython runs a Python handler on the main thread,
between two of its bytecodes, whatever that thread holds at the moment. The worker's
handler once asked for the drain there, which sets the main loop's wake-up
``threading.Event``; the main loop holds that Event's lock for a moment each round
(clearing it, about to wait on it), and a signal landing in that moment made the main
thread wait for a lock it held itself: the worker never stopped. So the handlers do
nothing (``_nothing``); ``signal.set_wakeup_fd`` has the interpreter write each signal's
number, as it arrives, to one end of a ``socket.socketpair``, and the relay's thread
blocks reading the other end and calls the action (``Worker.request_stop``, a child's
drain, ``StopAsked``) under ``SignalRelay.lock``, on a thread that holds nothing else.

**One relay per process** (``signal_relay()``): there is one wakeup fd per process, so
each worker or ``StopAsked`` made in it re-points the one relay (``on``); its thread and
socket pair stay, however many are made.

**Forks.** A process forked from the worker (a job's ``multiprocessing`` child, a
``Pool``'s) inherits the do-nothing handlers and the wakeup socket: its own SIGTERM would
reach the worker's relay and stop the worker, and the child would live on. The fork
hooks (``os.register_at_fork``, once, at import) block the relayed signals in the
forking thread from just before the fork (``_before_fork``) until the child has reset
the relay (``_after_fork``: no wakeup fd, the default handlers back, the sockets closed,
the relay as new; then the old mask, in parent and child): one sent the moment the child
exists goes to the child's default handler, not to the worker.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable

from django_delayq.engine.logtext import logged

logger = logging.getLogger(__name__)


class SignalRelay:
    """Signals acted on by a thread of their own (``delayq-signals``), never on the main
    thread (module docstring). The handlers do nothing; the interpreter writes each
    signal's number to a socket as it arrives (``signal.set_wakeup_fd``), and the relay's
    thread reads it and acts, holding ``lock`` (hold it to change actions and act on what
    the old ones did, at once). One per process (``signal_relay()``): a later ``on``
    re-points it, its thread and sockets stay; a process forked from this one forgets it
    (``forget_in_child``, called by the fork hook ``_after_fork``)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._actions: dict[int, Callable[[], object]] = {}
        self._sockets: tuple[socket.socket, socket.socket] | None = None

    def on(self, signum: int, action: Callable[[], object]) -> None:
        """Call ``action`` on the relay's thread at each ``signum`` (main thread only)."""
        with self.lock:
            self._actions[signum] = action
        if self._sockets is None:  # the relay's thread and sockets, once
            read, write = socket.socketpair()
            write.setblocking(False)
            try:
                signal.set_wakeup_fd(write.fileno(), warn_on_full_buffer=False)
            except ValueError:  # not the main thread: nothing of this call stays
                read.close()
                write.close()
                raise
            self._sockets = (read, write)
            threading.Thread(target=self._run, args=(read,), name="delayq-signals",
                             daemon=True).start()
        signal.signal(signum, _nothing)  # a handler is needed for the wakeup fd's write

    def _run(self, read: socket.socket) -> None:
        while data := read.recv(64):  # the write end stays open (``_sockets``)
            for signum in data:
                with self.lock:
                    try:
                        if (action := self._actions.get(signum)) is not None:
                            action()
                    except (Exception, SystemExit):  # the next signal is acted on too
                        logged(logger.exception, "acting on signal %d failed", signum)

    def forget_in_child(self) -> None:
        """In a process just forked from this one (its only thread; the relay's thread and
        ``lock``'s holder are gone): no wakeup fd, the relayed signals' default handlers
        (SIGINT: ``KeyboardInterrupt``), the relay's sockets closed."""
        if self._sockets is None:
            return
        read, write = self._sockets
        old = signal.set_wakeup_fd(-1)
        if old not in (-1, write.fileno()):  # not ours: left as it was
            signal.set_wakeup_fd(old, warn_on_full_buffer=False)
        for signum in list(self._actions):
            if signal.getsignal(signum) is _nothing:
                signal.signal(signum, signal.default_int_handler
                              if signum == signal.SIGINT else signal.SIG_DFL)
        read.close()
        write.close()
        # as new: an object carried across the fork (a Worker's) starts its own relay
        self.__init__()  # type: ignore[misc]


_relay: SignalRelay | None = None


def signal_relay() -> SignalRelay:
    """This process's relay (main thread only): one thread and one socket pair per
    process, whatever the number of workers or ``StopAsked`` made in it."""
    global _relay  # noqa: PLW0603 - one per process, made on the main thread
    if _relay is None:
        _relay = SignalRelay()
    return _relay


# The relayed signals are blocked in the forking thread from just before a fork until the
# child has forgotten the relay: one arriving in between (a job that starts a process and
# terminates it at once) is then delivered to the child's default handler, not written
# to this process's relay (which would stop the worker, and the child would live on).
_RELAYED = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
_fork_mask = threading.local()


def _before_fork() -> None:
    if _relay is not None and _relay._sockets is not None:  # it runs
        _fork_mask.old = signal.pthread_sigmask(signal.SIG_BLOCK, _RELAYED)


def _after_fork(in_child: bool) -> None:
    if in_child and _relay is not None:
        _relay.forget_in_child()
    old = getattr(_fork_mask, "old", None)
    if old is not None:
        _fork_mask.old = None
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a pending one: delivered


os.register_at_fork(before=_before_fork, after_in_parent=lambda: _after_fork(False),
                    after_in_child=lambda: _after_fork(True))  # once: at import


def _nothing(signum: int, frame: object) -> None:
    """The Python handler of a relayed signal: the relay acts (``SignalRelay``)."""
