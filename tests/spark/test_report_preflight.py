"""An unwritable ``--out`` or a missing ``--input`` fails before Spark starts (a session
takes seconds to start, the computation minutes): one line, well under a second, and
pyspark never imported. Each case runs in a fresh interpreter, so "never imported" means
just that."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    """name: (arguments, the one line expected)."""
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
    assert error == "1 " + line  # a failure while working: exit 1, one line
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
