#!/usr/bin/env python
"""Dramatiq in the comparison: ``dramatiq --processes 1 --threads 4``, Redis broker,
delayed messages with ``send_with_options(delay=ms)``. It has no bulk enqueue
(``group`` sends one message at a time), so its bulk figure is left empty."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


class Dramatiq:
    name = "dramatiq"
    warmup_s = 3.0

    def setup(self, url: str, workdir: Path) -> None:
        self.url = url
        os.environ["BENCH_REDIS_URL"] = url
        import dramatiq_tasks

        self.task = dramatiq_tasks.task

    def describe(self, concurrency: int) -> dict[str, str]:
        from importlib.metadata import version

        return {"version": "dramatiq %s" % version("dramatiq"),
                "settings": "dramatiq --processes 1 --threads %d, RedisBroker, max_retries=0"
                            % concurrency,
                "one": "actor.send_with_options(args=(due,), delay=due - now)",
                "bulk": "none (group() sends one message at a time)"}

    def enqueue_one(self, due_ms: list[int]) -> None:
        for due in due_ms:
            self.task.send_with_options(args=(due,), delay=max(0, due - common.now_ms()))

    def enqueue_bulk(self, due_ms: list[int]) -> bool:
        return False

    def enqueue_due(self, due_ms: list[int]) -> None:
        for due in due_ms:
            self.task.send(due)

    def worker(self, concurrency: int) -> tuple[list[str], dict[str, str]]:
        exe = str(Path(sys.executable).parent / "dramatiq")
        return ([exe, "dramatiq_tasks", "--processes", "1", "--threads", str(concurrency)],
                {"BENCH_REDIS_URL": self.url})


if __name__ == "__main__":
    sys.exit(common.main(Dramatiq()))
