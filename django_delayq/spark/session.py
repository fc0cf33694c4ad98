"""Build the SparkSession the pipeline runs on: local by default, any master when asked.

Executors run Python: PySpark starts, on every executor, the interpreter named by the
``PYSPARK_PYTHON`` environment variable of the driver when its SparkContext starts
(``python3`` on the executor's PATH when unset), and that interpreter must have
pyarrow, pandas and, for ``schedule_dataframe``, Django, django-delayq and the
project. ``spark.pyspark.python`` is read only by ``spark-submit``; a session built
here from Python ignores it. So ``build_session``:

- honours ``spark.pyspark.python`` given in ``conf`` by setting ``PYSPARK_PYTHON`` to it
  (what the caller asked for wins over the environment);
- otherwise, for every master, leaves a ``PYSPARK_PYTHON`` already set alone and sets
  it to this interpreter when unset: right for ``local`` and for a cluster whose nodes
  have the same environment at the same path (a shared venv, the same image); for
  other clusters give ``spark.pyspark.python`` (e.g. ``./env/bin/python`` with a packed
  environment in ``spark.archives``), see docs/pipeline.md.

Either only takes effect when this call creates the SparkContext (``getOrCreate``
returns a running session unchanged).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",  # buckets and days are UTC, like the export
    "spark.ui.showConsoleProgress": "false",
}
PYTHON_CONF = "spark.pyspark.python"


def executor_python(conf: Mapping[str, str] | None = None) -> str:
    """The interpreter executors will start, setting ``PYSPARK_PYTHON`` accordingly."""
    explicit = (conf or {}).get(PYTHON_CONF)
    if explicit:
        os.environ["PYSPARK_PYTHON"] = explicit
    return os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def build_session(master: str | None = "local[*]", *, app_name: str = "delayq",
                  jars: Iterable[str] = (), conf: Mapping[str, str] | None = None) -> Any:
    """``master=None``: ``spark-submit --master`` decides, else ``local[*]``."""
    from pyspark.sql import SparkSession  # lazy: the checks before a session run without pyspark

    builder = SparkSession.builder.appName(app_name)
    if not master and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        master = "local[*]"
    if master:
        builder = builder.master(master)
    python = executor_python(conf)
    jar_list = [j for j in jars if j]
    if jar_list:
        builder = builder.config("spark.jars", ",".join(jar_list))
    for key, value in {**DEFAULT_CONF, PYTHON_CONF: python, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
