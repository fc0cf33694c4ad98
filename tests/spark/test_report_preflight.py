"""An unwritable ``--out`` or a missing ``--input`` fails before Spark starts (a session
takes seconds to start, the computation minutes): one line, well under a second, and
pyspark never imported. Each case runs in a fresh interpreter, so "never imported" means
just that."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMAND = """
import sys, time, django
django.setup()
from django.core.management import call_command
from django.core.management.base import CommandError
started = time.monotonic()
try:
    call_command("delayq_report", *sys.argv[1:])
except CommandError as exc:
    print("%d %s" % (exc.returncode, exc))
print(time.monotonic() - started)
print("pyspark" in sys.modules)
"""
SUBMIT = """
import sys, time
started = time.monotonic()
from django_delayq.spark import report
try:
    report.main(sys.argv[1:])
except SystemExit as exc:
    print(exc.code)
print(time.monotonic() - started)
print("pyspark" in sys.modules)
"""


def _cases(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """name: (arguments, the one line expected). An unwritable ``--out`` is a failure
    while working (exit 1, as for delayq_export); a missing ``--input`` a bad option
    (exit 2)."""
    export = tmp_path / "export"
    export.mkdir()  # an export that found no rows yet: a report of 0 jobs, were --out good
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a directory")
    missing = tmp_path / "no-such-export"
    return {
        "unwritable out": (["--input", str(export), "--out", str(in_the_way / "report")],
                           "cannot write the report to %s: Not a directory (give a directory "
                           "this process can create and write to)" % (in_the_way / "report")),
        "missing input": (["--input", str(missing), "--out", str(tmp_path / "report")],
                          "no exported jobs at %s (run delayq_export --out %s)"
                          % (missing, missing)),
    }


def _run(code: str, args: list[str]) -> list[str]:
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PATH": "/usr/bin:/bin",
           "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, env=env, cwd=str(ROOT), timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("case", ["unwritable out", "missing input"])
def test_delayq_report_checks_its_paths_before_spark_starts(tmp_path: Path, case: str) -> None:
    args, line = _cases(tmp_path)[case]
    error, seconds, imported = _run(COMMAND, args)
    assert error == "%d %s" % (1 if case == "unwritable out" else 2, line)  # one line
    assert imported == "False" and float(seconds) < 1.0
    assert not (tmp_path / "report").exists()  # a missing input creates no output


@pytest.mark.parametrize("case", ["unwritable out", "missing input"])
def test_spark_submit_entry_point_checks_them_too(tmp_path: Path, case: str) -> None:
    args, line = _cases(tmp_path)[case]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SUBMIT, *args], capture_output=True,
                          text=True, env=env, cwd=str(ROOT), timeout=120)
    code, seconds, imported = done.stdout.splitlines()
    assert (code, done.stderr) == ("2", "delayq report: %s\n" % line)
    assert imported == "False" and float(seconds) < 1.0


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_run_report_refuses_a_bucket_that_is_no_positive_int(tmp_path: Path,
                                                              bad: Any) -> None:
    """Before the paths and before Spark: 0 was taken silently as "choose one", -5 gave
    a report of -5 s buckets and misplaced points."""
    from django_delayq.spark.report import run_report

    with pytest.raises(ValueError, match=r"bucket_seconds must be an int > 0, or None \(chosen "
                       r"from the data's span\), not %s" % re.escape(repr(bad))):
        run_report(None, tmp_path / "report", input=tmp_path, bucket_seconds=bad)
    assert not (tmp_path / "report").exists()
