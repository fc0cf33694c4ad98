"""``schedule_dataframe``'s driver-side check of queue and callable. A driver that has
set Django up checks them before Spark is asked to run anything. A driver that has not (a
plain PySpark script passing ``settings_module=``) is left as it is: the settings module
may need what only the executors have (an ``spark.executorEnv`` variable, an app on
their ``PYTHONPATH``), and a failed setup would break the driver process; the executors
check them. Run in a fresh interpreter (this one has Django set up), with a stand-in
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
                          ("tests.jobs.add", "nowhere", "SETUP"),
                          ("tests.jobs.nope", None, "tests.settings")):
    if module == "SETUP":
        import django
        os.environ["DJANGO_SETTINGS_MODULE"] = module = "tests.settings"
        django.setup()
    try:
        schedule_dataframe(Frame(), fn, queue=queue, settings_module=module)
    except (InvalidJob, LookupError) as exc:
        print(" | ".join(map(str, (type(exc).__name__, exc, apps.ready,
                                   os.environ.get("DJANGO_SETTINGS_MODULE")))))
"""


def test_only_a_driver_with_django_set_up_checks_queue_and_callable_there() -> None:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "DELAYQ_TEST_DB")}
    done = run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=120,
               env={**keep, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 4, done.stdout
    elsewhere, not_set_up, queue, callable_ = (line.split(" | ") for line in lines)
    # no Django on the driver: nothing set up there, the executors check (Spark asked)
    assert elsewhere == ["LookupError", "Spark was asked for select", "False", "None"]
    assert not_set_up == ["LookupError", "Spark was asked for select", "False", "None"]
    # Django set up on the driver: checked there, before Spark runs
    assert queue[0] == "InvalidJob" and queue[1].startswith("unknown queue 'nowhere'")
    assert queue[2:] == ["True", "tests.settings"]
    assert callable_[0] == "InvalidJob" and "tests.jobs.nope" in callable_[1]
