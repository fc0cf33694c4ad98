"""Tracebacks on a job's page: whole, escaped, the exception first, the worker's own
frames folded; chained exceptions and texts that are not tracebacks shown as they are."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_delayq import schedule
from django_delayq.admin.display import traceback_html
from django_delayq.models import Job
from django_delayq.testing import run_due_jobs

pytestmark = pytest.mark.django_db(transaction=True)

CHAINED = '''Traceback (most recent call last):
  File "/srv/shop/tasks.py", line 3, in charge
    api.pay()
  File "/venv/lib/site-packages/requests/api.py", line 9, in pay
    raise OSError("reset")
OSError: reset

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/venv/lib/site-packages/django_delayq/worker/runner.py", line 270, in _run
    result = execution.run(env.path, env.args, env.kwargs, ctx)
  File "/venv/lib/site-packages/django_delayq/worker/execution.py", line 24, in call
    result = fn(*args, **kwargs)
  File "/srv/shop/tasks.py", line 5, in charge
    raise PaymentError("<b>card</b> declined")
shop.tasks.PaymentError: <b>card</b> declined
second line of the message'''


def test_a_real_failure_shows_the_exception_first_and_folds_the_worker(delayq_settings,
                                                                       admin_client):
    job_id = schedule("tests.jobs.boom", "disk <full>", max_attempts=1).id
    run_due_jobs()
    html = admin_client.get(reverse("admin:django_delayq_job_change",
                                    args=(job_id,))).content.decode()
    shown = html.split("field-traceback_display", 1)[1]
    assert shown.index('<p class="delayq-exception">RuntimeError: disk &lt;full&gt;</p>') < (
        shown.index("Traceback (most recent call last)"))
    fold = shown.split('<details class="delayq-own-frames">', 1)[1].split("</details>", 1)[0]
    assert "frames of django_delayq (the worker)</summary>" in fold
    assert "worker/runner.py" in fold and "tests/jobs.py" not in fold
    assert 'tests/jobs.py&quot;, line' in shown  # the job's own frame, unfolded
    assert "disk <full>" not in html  # escaped everywhere
    attempt = html.split("field-error_detail", 1)[1]
    assert '<p class="delayq-exception">' in attempt  # the attempt history's too
    assert Job.objects.get(pk=job_id).traceback.rstrip().endswith("RuntimeError: disk <full>")


def test_a_chained_traceback_keeps_both_parts_and_leads_with_the_last_exception():
    html = str(traceback_html(CHAINED))
    head = html.split("</p>", 1)[0]
    assert head == ('<p class="delayq-exception">shop.tasks.PaymentError: &lt;b&gt;card'
                    "&lt;/b&gt; declined\nsecond line of the message")
    assert "OSError: reset" in html and "direct cause" in html
    assert html.count('<details class="delayq-own-frames">') == 1
    assert "requests/api.py" in html.split("<details", 1)[0]  # not the worker's: shown


def test_text_that_is_not_a_traceback_is_shown_as_it_is():
    assert traceback_html("") == "-" and traceback_html(None) == "-"
    html = str(traceback_html("killed <by> the OOM killer"))
    assert html == ('<p class="delayq-exception">killed &lt;by&gt; the OOM killer</p>'
                    '<div class="delayq-traceback">killed &lt;by&gt; the OOM killer</div>')
