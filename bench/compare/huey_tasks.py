"""Huey's benchmark task on a RedisHuey at BENCH_REDIS_URL."""

import os

import recorder
from huey import RedisHuey

huey = RedisHuey("bench", url=os.environ["BENCH_REDIS_URL"])


@huey.task()
def task(due_ms: int) -> None:
    recorder.record(due_ms)
