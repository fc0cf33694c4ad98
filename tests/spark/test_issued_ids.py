"""The highest attempt id a database has handed out (``export_attempts.highest_issued``,
which bounds the ids an export state file may name): deleted rows' ids count, and a
counter set back to just above the rows that remain (SQLite's ``sqlite_sequence``,
PostgreSQL's ``ALTER SEQUENCE ... RESTART WITH n``, whose ``is_called`` is then false)
bounds by the id before its next one. Runs on the database of the pass."""

from __future__ import annotations

import pytest
from django.db import connection

from django_delayq.models import JobAttempt
from django_delayq.spark import export_attempts
from tests.spark.data import known_jobs, save_jobs
from tests.spark.test_export_attempts import _fail, _jobs

pytestmark = pytest.mark.django_db(transaction=True)


def _next_id_after(top: int) -> None:
    """Set the table's id counter back so that its next id is ``top + 1``."""
    table = JobAttempt._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            cursor.execute("ALTER SEQUENCE %s RESTART WITH %d" % (cursor.fetchone()[0],
                                                                  top + 1))
        else:
            cursor.execute("UPDATE sqlite_sequence SET seq = %s WHERE name = %s",
                           [top, table])


def test_deleted_ids_count_and_a_counter_set_back_bounds_by_the_id_before_its_next() -> None:
    save_jobs(known_jobs())
    ids = _fail(_jobs(81, 90))
    top = max(ids)
    JobAttempt.objects.filter(id__gt=top - 3).delete()
    assert export_attempts.highest_issued() == top  # the deleted rows' ids were handed out
    _next_id_after(top - 2)
    assert export_attempts.highest_issued() == top - 2
    assert JobAttempt.objects.create(job_id="a081", number=9, outcome="retrying",
                                     worker_id="host-1").pk == top - 1
