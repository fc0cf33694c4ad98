"""The core package never imports the Spark extra (nor pyspark, pyarrow, matplotlib)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys, django
django.setup()
import django_delayq, django_delayq.core.api, django_delayq.worker.loop, django_delayq.admin.job_admin
from django.core.management import get_commands, load_command_class
for name in ("delayq_export", "delayq_prune"):
    load_command_class("django_delayq", name)
heavy = [m for m in ("pyspark", "pyarrow", "matplotlib", "django_delayq.spark") if m in sys.modules]
print(heavy)
"""


def test_core_does_not_import_the_spark_extra() -> None:
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin"}
    code = CODE.replace("django_delayq.admin.job_admin", "django_delayq.core.conf")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True, cwd=str(__import__("pathlib").Path(__file__)
                                                      .resolve().parents[2]))
    assert out.stdout.strip() == "[]", out.stderr
