"""RQ's benchmark task (importable by the rq worker as ``rq_tasks.task``)."""

import recorder


def task(due_ms: int) -> None:
    recorder.record(due_ms)
