"""django-delayq's benchmark job: records its start like every peer's task."""

import recorder


def record(due_ms: int) -> None:
    recorder.record(due_ms)
