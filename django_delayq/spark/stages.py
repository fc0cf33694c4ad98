"""Progress of a report while Spark works: each step as it starts and ends, and every few
seconds the tasks done in the Spark stages running then.

A report is a dozen Spark jobs (count, aggregations, collects); on a large export or a
busy cluster some take minutes. Without this the command printed nothing until the end::

    delayq_report: reading jobs ...
    delayq_report: summary per queue and callable ...
    delayq_report:   stage 7 (collect at summary.py:97): 38/200 tasks (4 running) after 12s
    delayq_report: summary per queue and callable done in 21.4s

The stage lines come from ``SparkContext.statusTracker()``, read by a daemon thread of
the driver every ``every`` seconds (nothing printed while no stage runs).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LABEL = "delayq_report"


def active_stages(spark: SparkSession) -> list[str]:
    """One line per Spark stage running now: id, name, tasks done of all, running."""
    tracker = spark.sparkContext.statusTracker()
    lines = []
    for stage_id in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(stage_id)
        if info is None:  # finished between the two calls
            continue
        lines.append("stage %d (%s): %d/%d tasks (%d running)" % (
            info.stageId, info.name, info.numCompletedTasks, info.numTasks,
            info.numActiveTasks))
    return lines


class StageProgress:
    def __init__(self, spark: SparkSession | None, stream: TextIO | None = None, *,
                 enabled: bool = True, every: float = 5.0) -> None:
        self.spark = spark
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.every = every
        self._step_started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self, text: str) -> None:
        if self.enabled:
            self.stream.write("%s: %s\n" % (LABEL, text))
            self.stream.flush()

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Announce ``name``, run the block, and say how long it took."""
        self.write("%s ..." % name)
        self._step_started = started = time.monotonic()
        yield
        self.write("%s done in %.1fs" % (name, time.monotonic() - started))

    def __enter__(self) -> StageProgress:
        if self.enabled:
            self._thread = threading.Thread(target=self._poll, name="delayq-report-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.every + 5)

    def _poll(self) -> None:
        while not self._stop.wait(self.every):
            if self.spark is None:  # no session to ask
                return
            try:
                lines = active_stages(self.spark)
            except Exception:  # noqa: BLE001 - the session is stopping: nothing to show
                return
            elapsed = time.monotonic() - self._step_started
            for line in lines:
                self.write("  %s after %.0fs" % (line, elapsed))
