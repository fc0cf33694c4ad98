#!/usr/bin/env python
"""Celery in the comparison: ``celery worker --pool threads -c 4`` (one process), Redis
broker, ``apply_async(eta=...)`` (countdown); bulk = ``group(...).apply_async()``."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

BATCH = 1000


def _at(due_ms: int) -> datetime:
    return datetime.fromtimestamp(due_ms / 1000, tz=UTC)


class Celery:
    name = "celery"
    warmup_s = 4.0
    lead_s = 8.0  # its bulk enqueue is slow: the last job must be sent before the first is due

    def setup(self, url: str, workdir: Path) -> None:
        self.url = url
        os.environ["BENCH_REDIS_URL"] = url
        import celery_tasks

        self.task = celery_tasks.task

    def describe(self, concurrency: int) -> dict[str, str]:
        from importlib.metadata import version

        return {"version": "celery %s (kombu %s)" % (version("celery"), version("kombu")),
                "settings": "celery worker --pool threads -c %d --without-gossip "
                            "--without-mingle --without-heartbeat, task_ignore_result"
                            % concurrency,
                "one": "task.apply_async((due,), eta=dt)",
                "bulk": "group(task.s(due).set(eta=dt) ...).apply_async() per %d" % BATCH}

    def enqueue_one(self, due_ms: list[int]) -> None:
        for due in due_ms:
            self.task.apply_async((due,), eta=_at(due))

    def enqueue_bulk(self, due_ms: list[int]) -> bool:
        from celery import group

        for i in range(0, len(due_ms), BATCH):
            group(self.task.s(due).set(eta=_at(due)) for due in due_ms[i:i + BATCH]).apply_async()
        return True

    def enqueue_due(self, due_ms: list[int]) -> None:
        from celery import group

        for i in range(0, len(due_ms), BATCH):
            group(self.task.s(due) for due in due_ms[i:i + BATCH]).apply_async()

    def worker(self, concurrency: int) -> tuple[list[str], dict[str, str]]:
        exe = str(Path(sys.executable).parent / "celery")
        return ([exe, "-A", "celery_tasks", "worker", "--pool", "threads", "-c", str(concurrency),
                 "-Q", "bench", "--without-gossip", "--without-mingle", "--without-heartbeat",
                 "--loglevel", "WARNING"], {"BENCH_REDIS_URL": self.url})


if __name__ == "__main__":
    sys.exit(common.main(Celery()))
