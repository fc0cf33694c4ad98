"""DelayQ backends under the names of Django's two reference backends.

* ``Enqueued`` (for ``DummyBackend``): the DelayQ backend; a result stays ``READY`` until a
  worker runs it. ``results`` lists what it enqueued and ``clear()`` deletes those rows,
  as the tests of Django's dummy backend expect.
* ``RunAtOnce`` (for ``ImmediateBackend``): enqueues, then runs a real worker in burst
  mode in this process, so the result is final when ``enqueue()`` returns (what Django's
  tests expect of an immediate run).
"""

from __future__ import annotations

from typing import Any

from django_delayq.backends import DelayQBackend
from django_delayq.models import Job
from django_delayq.testing import run_worker


class Enqueued(DelayQBackend):
    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.results: list[Any] = []

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        self.results.append(result)
        return result

    def clear(self) -> None:
        Job.objects.filter(pk__in=[r.id for r in self.results]).delete()
        self.results.clear()


class RunAtOnce(DelayQBackend):
    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        run_worker()
        result.refresh()
        return result
