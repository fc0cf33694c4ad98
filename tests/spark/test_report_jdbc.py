"""The report read over JDBC: the driver class of the URL's database is passed to Spark
(without it Java's DriverManager does not see a driver loaded from ``spark.jars``: "No
suitable driver"), and a read that fails is one line naming the table, the URL and the
JVM's error. The read of a real table runs only where this machine has a PostgreSQL
driver jar (``tests/spark/jars.py``) and the tests run on PostgreSQL."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from django_delayq.spark.source import jdbc_driver, read_jdbc
from tests.spark.data import known_jobs, save_jobs
from tests.spark.jars import JDBC_JAR

NOWHERE = "jdbc:postgresql://127.0.0.1:1/none?password=secret"


def test_the_driver_class_is_that_of_the_urls_database() -> None:
    assert jdbc_driver("jdbc:postgresql://db:5432/shop") == "org.postgresql.Driver"
    assert jdbc_driver("JDBC:MySQL://db/shop") == "com.mysql.cj.jdbc.Driver"
    assert jdbc_driver("jdbc:sqlite:/srv/shop.sqlite3") == "org.sqlite.JDBC"
    assert jdbc_driver("jdbc:oracle:thin:@db:1521:shop") is None
    assert jdbc_driver("postgresql://db/shop") is None


def test_a_failed_read_is_one_line_naming_table_url_and_driver(spark: Any) -> None:
    """Without the jar the driver class is not found, with it the connection is refused:
    either way one line, the driver class given, the password after ``?`` not shown."""
    with pytest.raises(ValueError) as caught:
        read_jdbc(spark, NOWHERE, table="django_delayq_job")
    text = str(caught.value)
    assert "\n" not in text and "secret" not in text, text
    assert text.startswith("cannot read django_delayq_job over JDBC from "
                           "jdbc:postgresql://127.0.0.1:1/none: "), text
    assert "driver class org.postgresql.Driver" in text and "No suitable driver" not in text
    with pytest.raises(ValueError, match=r"driver class org\.example\.Nope"):
        read_jdbc(spark, NOWHERE, properties={"driver": "org.example.Nope"})


def test_the_command_says_why_in_one_line(tmp_path: Path, spark: Any) -> None:
    jar = tmp_path / "driver.jar"
    jar.write_bytes(b"")  # a file: the option's check passes, Spark then finds no driver
    with pytest.raises(CommandError) as caught:
        call_command("delayq_report", "--jdbc-url", NOWHERE, "--jdbc-jar", JDBC_JAR or str(jar),
                     "--jdbc-driver", "org.example.Nope", "--out", str(tmp_path / "out"),
                     verbosity=0)
    text = str(caught.value)
    assert "\n" not in text and "driver class org.example.Nope" in text, text


@pytest.mark.skipif(JDBC_JAR is None, reason="no PostgreSQL JDBC driver jar on this machine")
@pytest.mark.skipif(settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
                    reason="reads the test database over JDBC: DELAYQ_TEST_DB=postgres")
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(900)
def test_the_documented_command_reads_postgresql(tmp_path: Path, spark: Any) -> None:
    """``delayq_report --jdbc-url ... --jdbc-jar ...`` as docs/pipeline.md shows it, no
    driver class given."""
    from django.db import connection

    save_jobs(known_jobs())
    db = connection.settings_dict
    url = "jdbc:postgresql://%s:%s/%s" % (db["HOST"], db["PORT"], db["NAME"])
    out = io.StringIO()
    call_command("delayq_report", "--jdbc-url", url, "--jdbc-jar", JDBC_JAR,
                 "--out", str(tmp_path / "report"), stdout=out, verbosity=0)
    assert "111 jobs" in out.getvalue()
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["jobs"] == 111 and report["failed_attempts_available"] is True


class _Java:
    """A stand-in for a Java exception seen through Py4J: ``toString`` and ``getCause``."""

    def __init__(self, text: str, cause: _Java | None = None) -> None:
        self.text, self.cause = text, cause

    def toString(self) -> str:  # noqa: N802 - Java's name
        return self.text

    def getCause(self) -> _Java | None:  # noqa: N802 - Java's name
        return self.cause


class _Failed(Exception):
    def __init__(self, java: _Java) -> None:
        super().__init__("py4j call and stack\n...")
        self.java_exception = java


@pytest.mark.parametrize("cause", [
    'org.postgresql.util.PSQLException: FATAL: database "nodb" does not exist',
    "org.postgresql.util.PSQLException: Connection to 127.0.0.1:5499 refused. Check that the "
    "hostname and port are correct",
])
def test_the_line_names_the_innermost_cause(cause: str) -> None:
    """Spark's "Couldn't connect to the database" is the same for a missing database and a
    closed port: the line carries the driver's own message, a password redacted."""
    from django_delayq.spark.source import _jdbc_error

    java = _Java("org.apache.spark.SparkSQLException: [FAILED_JDBC.CONNECTION] Couldn't "
                 "connect to the database\n\tat ...",
                 _Java("java.sql.SQLException: wrapped", _Java(cause + "\n\tat org...")))
    line = _jdbc_error(_Failed(java))
    assert line == ("org.apache.spark.SparkSQLException: [FAILED_JDBC.CONNECTION] Couldn't "
                    "connect to the database (cause: %s)" % cause)
    hidden = _jdbc_error(_Failed(_Java("x", _Java("E: user=u password=hunter2, db=x"))),
                         ("s3cret",))
    assert "hunter2" not in hidden and "password=***" in hidden
    assert "s3cret" not in _jdbc_error(_Failed(_Java("x", _Java("E: token s3cret"))), ("s3cret",))
