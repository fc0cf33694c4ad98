#!/usr/bin/env python
"""RQ in the comparison: ``rq worker --with-scheduler`` (SimpleWorker: no fork per job,
one job at a time); ``enqueue_at`` for delayed jobs (ScheduledJobRegistry), result_ttl=0."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

BATCH = 1000


def _at(due_ms: int) -> datetime:
    return datetime.fromtimestamp(due_ms / 1000, tz=UTC)


class RQ:
    name = "rq"
    warmup_s = 3.0

    def setup(self, url: str, workdir: Path) -> None:
        import redis
        from rq import Queue

        self.url = url
        self.queue = Queue("bench", connection=redis.Redis.from_url(url))

    def describe(self, concurrency: int) -> dict[str, str]:
        from importlib.metadata import version

        return {"version": "rq %s" % version("rq"),
                "settings": "rq worker --with-scheduler -w rq.worker.SimpleWorker (1 job at a "
                            "time, no fork), result_ttl=0",
                "one": "Queue.enqueue_at(dt, fn, due)",
                "bulk": "create_job + schedule_job(pipeline=) per %d (enqueue_many takes no "
                        "time)" % BATCH}

    def enqueue_one(self, due_ms: list[int]) -> None:
        for due in due_ms:
            self.queue.enqueue_at(_at(due), "rq_tasks.task", due, result_ttl=0)

    def enqueue_bulk(self, due_ms: list[int]) -> bool:
        q = self.queue
        for i in range(0, len(due_ms), BATCH):
            with q.connection.pipeline() as pipe:
                for due in due_ms[i:i + BATCH]:
                    job = q.create_job("rq_tasks.task", args=(due,), result_ttl=0)
                    q.schedule_job(job, _at(due), pipeline=pipe)
                pipe.execute()
        return True

    def enqueue_due(self, due_ms: list[int]) -> None:
        from rq import Queue

        for i in range(0, len(due_ms), BATCH):
            self.queue.enqueue_many([Queue.prepare_data("rq_tasks.task", args=(due,),
                                                        result_ttl=0)
                                     for due in due_ms[i:i + BATCH]])

    def worker(self, concurrency: int) -> tuple[list[str], dict[str, str]]:
        rq = str(Path(sys.executable).parent / "rq")
        return ([rq, "worker", "--with-scheduler", "-w", "rq.worker.SimpleWorker", "--quiet",
                 "--url", self.url, "bench"], {})


if __name__ == "__main__":
    sys.exit(common.main(RQ()))
