"""What every benchmark job does: append "<due_ms> <start_ms>" to the file named by
``BENCH_RECORD`` (one ``O_APPEND`` write, atomic for a short line; no Redis round trip).

Standard library only: imported by django-delayq's job and by every peer's task alike,
so each system is measured the same way (start time taken as the job's first statement).
"""

from __future__ import annotations

import os
import time

_fd: int | None = None


def record(due_ms: float) -> None:
    start_ms = time.time() * 1000
    global _fd
    if _fd is None:
        _fd = os.open(os.environ["BENCH_RECORD"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, b"%d %.3f\n" % (int(due_ms), start_ms))


def read(path: str) -> list[tuple[float, float]]:
    """(due_ms, start_ms) of every recorded execution."""
    try:
        with open(path, "rb") as fh:
            lines = fh.read().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        due, _, start = line.partition(b" ")
        if start:
            out.append((float(due), float(start)))
    return out


def count(path: str) -> int:
    try:
        with open(path, "rb") as fh:
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0
