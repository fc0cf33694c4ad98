"""Build the SparkSession the pipeline runs on: local by default, any master when asked."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",  # buckets and days are UTC, like the export
    "spark.ui.showConsoleProgress": "false",
}


def build_session(master: str | None = "local[*]", *, app_name: str = "delayq",
                  jars: Iterable[str] = (), conf: Mapping[str, str] | None = None) -> Any:
    """``master=None``: ``spark-submit --master`` decides, else ``local[*]``."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if not master and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        master = "local[*]"
    if master:
        builder = builder.master(master)
    if master and master.startswith("local"):  # executors: this interpreter, not PATH's python3
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jar_list = [j for j in jars if j]
    if jar_list:
        builder = builder.config("spark.jars", ",".join(jar_list))
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
