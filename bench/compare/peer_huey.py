#!/usr/bin/env python
"""Huey in the comparison: ``huey_consumer -w 4 -k thread`` (one process), RedisHuey,
``task.schedule(args, delay=s)``. Huey has no bulk enqueue: its bulk figure is empty."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


class Huey:
    name = "huey"
    warmup_s = 3.0

    def setup(self, url: str, workdir: Path) -> None:
        self.url = url
        os.environ["BENCH_REDIS_URL"] = url
        import huey_tasks

        self.task = huey_tasks.task

    def describe(self, concurrency: int) -> dict[str, str]:
        from importlib.metadata import version

        return {"version": "huey %s" % version("huey"),
                "settings": "huey_consumer -w %d -k thread (scheduler interval 1 s default)"
                            % concurrency,
                "one": "task.schedule(args=(due,), delay=(due - now) s)",
                "bulk": "none"}

    def enqueue_one(self, due_ms: list[int]) -> None:
        for due in due_ms:
            self.task.schedule(args=(due,), delay=max(0, due - common.now_ms()) / 1000)

    def enqueue_bulk(self, due_ms: list[int]) -> bool:
        return False

    def enqueue_due(self, due_ms: list[int]) -> None:
        for due in due_ms:
            self.task(due)

    def worker(self, concurrency: int) -> tuple[list[str], dict[str, str]]:
        exe = str(Path(sys.executable).parent / "huey_consumer")
        return ([exe, "huey_tasks.huey", "-w", str(concurrency), "-k", "thread", "-q"],
                {"BENCH_REDIS_URL": self.url})


if __name__ == "__main__":
    sys.exit(common.main(Huey()))
