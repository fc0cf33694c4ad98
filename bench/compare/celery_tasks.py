"""Celery's benchmark task on a Redis broker at BENCH_REDIS_URL (results ignored)."""

import os

import recorder
from celery import Celery

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"])
app.conf.update(task_ignore_result=True, task_default_queue="bench",
                broker_connection_retry_on_startup=True, worker_hijack_root_logger=False)


@app.task(name="bench.task")
def task(due_ms: int) -> None:
    recorder.record(due_ms)
