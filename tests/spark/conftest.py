"""One SparkSession (local[2]) for every Spark test; skipped only without pyspark.

Executors are separate Python processes. They inherit the environment of the JVM,
which starts with the session, so the variables ``executor_settings`` reads are set
here first: the test database, the private redis-server and a session key prefix.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

NO_JAVA = not (shutil.which("java") or os.environ.get("JAVA_HOME"))


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """A machine without a JVM cannot run Spark: its tests are reported as skipped."""
    no_jvm = pytest.mark.skipif(NO_JAVA, reason="Spark needs Java 17+: no java on PATH "
                                               "and no JAVA_HOME")
    for item in items:
        if "tests/spark/" in str(item.path):
            item.add_marker(no_jvm)

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
pytest.importorskip("matplotlib")

EXECUTOR_SETTINGS = "tests.spark.executor_settings"
SPARK_PREFIX = "spark%s" % uuid.uuid4().hex[:8]


@pytest.fixture(scope="session")
def spark(redis_server: Any) -> Iterator[Any]:
    from django.conf import settings

    from django_delayq.spark.session import build_session
    from tests.spark.jars import JDBC_JAR

    db = settings.DATABASES["default"]
    os.environ["DELAYQ_SPARK_TEST_DBNAME"] = str(db.get("TEST", {}).get("NAME") or db["NAME"])
    os.environ["DELAYQ_SPARK_TEST_PREFIX"] = SPARK_PREFIX
    os.environ["DELAYQ_REDIS_URL"] = redis_server.url
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = build_session("local[2]", app_name="delayq-tests", jars=[JDBC_JAR or ""], conf={
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.ui.enabled": "false",
        "spark.driver.memory": "1g",
        # The JVM's quick compiler only, and the serial collector: the tests' Spark jobs
        # are many small ones on a hundred rows, where the optimising compiler spends
        # more CPU compiling than it saves (a report: 34 s cold, 14 s so). The plans and
        # the code Spark runs are the same. Room for the compiled code of the session's
        # hundreds of generated classes: a loaded run filled the code cache ("CodeCache
        # is full. Compiler has been disabled", then "Out of space in CodeCache for method
        # handle intrinsic" failed a task and every Spark test after it).
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
                                         "-XX:ReservedCodeCacheSize=512m",
    })
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def spark_delayq(settings: Any, redis_server: Any, spark: Any) -> Any:
    """Driver settings matching the executors' (same Redis, same prefix), keys emptied."""
    from django_delayq.core.connection import reset

    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_server.url, "PREFIX": SPARK_PREFIX}
    client = redis_server.client()
    keys = list(client.scan_iter(match="*%s*" % SPARK_PREFIX))
    if keys:
        client.delete(*keys)
    reset()
    yield settings
    reset()
