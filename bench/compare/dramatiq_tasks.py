"""Dramatiq's benchmark actor on a RedisBroker at BENCH_REDIS_URL."""

import os

import dramatiq
import recorder
from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench", max_retries=0)
def task(due_ms: int) -> None:
    recorder.record(due_ms)
