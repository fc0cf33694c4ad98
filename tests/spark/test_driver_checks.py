"""``schedule_dataframe`` from a driver that has not set Django up (a plain PySpark
script passing ``settings_module=``): the queue and the callable are still checked on
the driver, before Spark is asked to run anything, with Django set up there as the
executors set it up. Only a settings module the driver cannot import leaves the check to
the executors. Run in a fresh interpreter (this one has Django set up), with a stand-in
DataFrame that fails if Spark is asked for anything: no JVM."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from subprocess import run

ROOT = Path(__file__).resolve().parents[2]

DRIVER = """
import os
os.environ.pop("DJANGO_SETTINGS_MODULE", None)
from django.apps import apps
from django_delayq.exceptions import InvalidJob
from django_delayq.spark import schedule_dataframe

class Frame:
    columns = ["k"]

    def __getattr__(self, name):
        raise LookupError("Spark was asked for %s" % name)

for fn, queue, module in (("tests.jobs.add", "nowhere", "no_such_project.settings"),
                          ("tests.jobs.add", "nowhere", "tests.settings"),
                          ("tests.jobs.nope", None, "tests.settings")):
    try:
        schedule_dataframe(Frame(), fn, queue=queue, settings_module=module)
    except (InvalidJob, LookupError) as exc:
        print(" | ".join(map(str, (type(exc).__name__, exc, apps.ready,
                                   os.environ.get("DJANGO_SETTINGS_MODULE")))))
"""


def test_a_driver_without_django_checks_queue_and_callable_before_spark_runs() -> None:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "DELAYQ_TEST_DB")}
    done = run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=120,
               env={**keep, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 3, done.stdout
    elsewhere, queue, callable_ = (line.split(" | ") for line in lines)
    # not importable here (it may be on the executors'): their check, Spark asked to run
    assert elsewhere == ["LookupError", "Spark was asked for select", "False", "None"]
    assert queue[0] == "InvalidJob" and queue[1].startswith("unknown queue 'nowhere'")
    assert queue[2:] == ["True", "tests.settings"]  # set up as the executors will be
    assert callable_[0] == "InvalidJob" and "tests.jobs.nope" in callable_[1]
