"""A dependency-free progress bar on stderr (a line per 10% when not a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None,
                 enabled: bool = True) -> None:
        self.total = max(total, 0)
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.done = 0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_decile = -1
        self._started = time.monotonic()

    def update(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        pct = 100 if self.total == 0 else min(100, self.done * 100 // self.total)
        if self._tty:
            bar = "#" * (pct // 4)
            self.stream.write("\r%s [%-25s] %3d%% %d/%d" % (self.label, bar, pct, self.done,
                                                            self.total))
            self.stream.flush()
        elif pct // 10 != self._last_decile:
            self._last_decile = pct // 10
            self.stream.write("%s %3d%% %d/%d\n" % (self.label, pct, self.done, self.total))

    def close(self) -> None:
        if not self.enabled:
            return
        elapsed = time.monotonic() - self._started
        if self._tty:
            self.stream.write("\n")
        self.stream.write("%s done: %d rows in %.1fs\n" % (self.label, self.done, elapsed))
        self.stream.flush()
