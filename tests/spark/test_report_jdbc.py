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
