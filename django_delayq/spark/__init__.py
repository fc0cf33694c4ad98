"""The optional Spark pipeline: audit export, reports, bulk scheduling from a DataFrame.

Install with ``pip install django-delayq[spark]`` (pyspark, pyarrow, matplotlib).
Nothing in the core package imports this one; import it explicitly. Its own
names load lazily (a module-level ``__getattr__`` imports each when it is first asked
for), so ``delayq_export`` needs pyarrow but not pyspark.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LAZY = {
    "export_jobs": "django_delayq.spark.export",
    "ExportResult": "django_delayq.spark.export",
    "prune_jobs": "django_delayq.spark.prune",
    "PruneResult": "django_delayq.spark.prune",
    "build_session": "django_delayq.spark.session",
    "read_jobs": "django_delayq.spark.source",
    "read_attempts": "django_delayq.spark.source",
    "compute_report": "django_delayq.spark.summary",
    "run_report": "django_delayq.spark.report",
    "schedule_dataframe": "django_delayq.spark.dataframe_jobs",
}

__all__ = list(_LAZY)

if TYPE_CHECKING:  # pragma: no cover
    from django_delayq.spark.dataframe_jobs import schedule_dataframe  # noqa: F401
    from django_delayq.spark.export import ExportResult, export_jobs  # noqa: F401
    from django_delayq.spark.prune import PruneResult, prune_jobs  # noqa: F401
    from django_delayq.spark.report import run_report  # noqa: F401
    from django_delayq.spark.session import build_session  # noqa: F401
    from django_delayq.spark.source import read_attempts, read_jobs  # noqa: F401
    from django_delayq.spark.summary import compute_report  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module 'django_delayq.spark' has no attribute %r" % name)
    return getattr(importlib.import_module(module), name)
