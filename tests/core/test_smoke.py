import pytest

from django_delayq import schedule
from django_delayq.models import Job
from django_delayq.testing import run_due_jobs

pytestmark = pytest.mark.django_db(transaction=True)


def test_schedule_and_run(delayq_settings):
    h = schedule("tests.jobs.add", 2, 3)
    assert Job.objects.get(pk=h.id).status == "scheduled"
    assert run_due_jobs() == 1
    job = h.refresh()
    assert job.status == "succeeded", job.last_error
    assert job.result == 5
