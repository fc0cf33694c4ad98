"""The job admin shows any value a row holds: JSON nested ~980 levels deep (a row written
into the database directly) used to make the ORM exhaust the stack while loading the
list, a server error for everyone; a huge value is cut. The dashboard and
``delayq_status`` read a running job's progress the same way (core/stored.py)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.urls import reverse

from django_delayq import schedule
from django_delayq.admin import dashboard
from django_delayq.admin.display import SHOWN_CHARS
from django_delayq.models import Job
from django_delayq.observe import redis_state

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = "[" * 980 + "]" * 980
NOTE = "nested more than 100 levels deep: shown as stored"


def _write(job_id: str, column: str, text: str) -> None:
    """Store ``text`` as the column's JSON with a raw UPDATE (no ORM encoding)."""
    cast = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
    with connection.cursor() as cursor:
        cursor.execute("UPDATE %s SET %s = %s WHERE id = %%s" % (
            Job._meta.db_table, connection.ops.quote_name(column), cast), [text, job_id])


@pytest.mark.parametrize("column", ["args", "kwargs", "result", "progress", "retry_on",
                                    "backoff"])
def test_list_and_page_show_a_value_nested_980_deep(delayq_settings, admin_client, column) -> None:  # type: ignore[no-untyped-def]
    job = schedule("tests.jobs.noop", delay=3600)
    _write(job.id, column, '{"a": %s}' % DEEP if column == "kwargs" else DEEP)
    listed = admin_client.get(reverse("admin:django_delayq_job_changelist"))
    assert listed.status_code == 200 and job.id in listed.content.decode()
    page = admin_client.get(reverse("admin:django_delayq_job_change", args=[job.id]))
    assert page.status_code == 200
    html = page.content.decode()
    assert NOTE in html and "[[[[[[[[" in html


def test_a_huge_result_is_cut_on_the_page(delayq_settings, admin_client) -> None:  # type: ignore[no-untyped-def]
    job = schedule("tests.jobs.noop", delay=3600)
    _write(job.id, "result", '"%s"' % ("y" * (SHOWN_CHARS + 5000)))
    page = admin_client.get(reverse("admin:django_delayq_job_change", args=[job.id]))
    html = page.content.decode()
    assert page.status_code == 200 and "y" * SHOWN_CHARS in html
    assert "y" * (SHOWN_CHARS + 1) not in html
    assert "%d characters in all; the first %d shown" % (SHOWN_CHARS + 5000, SHOWN_CHARS) in html


def test_dashboard_and_status_read_a_deep_progress(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    job = schedule("tests.jobs.noop", delay=3600)
    _write(job.id, "progress", DEEP)
    row = redis_state.WorkerRow(
        id="w", heartbeat_age_s=0.0, info={}, error=None, processes=None, running=None,
        prefetched=None, jobs=[redis_state.RunningJob(id=job.id, queue="default", callable="x",
                                                      age_s=1.0)])
    [shown] = redis_state.with_progress([row])  # one reading for the dashboard and the status
    assert dashboard.worker_data(shown)["jobs"][0]["progress"].startswith("[[[[")
    assert shown.jobs[0].progress == DEEP
