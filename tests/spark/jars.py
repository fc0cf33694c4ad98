"""The JDBC driver jar the Spark tests read PostgreSQL with, when this machine has one
(nothing is downloaded): ``DELAYQ_TEST_JDBC_JAR``, else the newest PostgreSQL driver in
the local Maven repository. The session of ``conftest`` puts it on ``spark.jars``."""

from __future__ import annotations

import glob
import os


def postgresql_jar() -> str | None:
    given = os.environ.get("DELAYQ_TEST_JDBC_JAR")
    if given:
        return given if os.path.isfile(given) else None
    found = sorted(glob.glob(os.path.expanduser(
        "~/.m2/repository/org/postgresql/postgresql/*/postgresql-*.jar")))
    return found[-1] if found else None


JDBC_JAR = postgresql_jar()
