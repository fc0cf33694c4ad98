#!/usr/bin/env bash
# The whole test suite, step by step: every step runs even when an earlier one failed,
# a summary names the failed steps, and the exit code is non-zero if any failed.
# `make test` calls this after creating .venv; it takes the interpreter as $1.
#
# The passes (docs/testing.md): pytest on SQLite runs every test; on PostgreSQL and on
# Django 6.x it runs again the tests that tests/conftest.py marks `postgres` (they use the
# database) and `django6` (they touch Django). While the SQLite pass runs, the linters and
# the Django 6.x install run beside it; the PostgreSQL and Django 6.x passes then run side
# by side. The SQLite pass spreads its tests over DELAYQ_TEST_WORKERS processes (pytest-xdist;
# default 3: most tests wait on real workers and servers, not on the CPU), the PostgreSQL
# pass over 3, the Django 6.x pass over as many as the SQLite pass (it takes their places).
# The PostgreSQL pass starts once the SQLite pass's Spark and Redis Cluster process is
# done (the SQLite pass's other processes may still run).
set -u
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
WORKERS="${DELAYQ_TEST_WORKERS:-3}"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/delayq-make-test.XXXXXX")
STARTED=$SECONDS
ORDER=(ruff mypy import-layers django-check migrations pytest-sqlite django6-install
       tasks-conformance pytest-postgres pytest-django6)

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) ($(nproc 2>/dev/null) cores)"

# step NAME CMD...: run CMD, its output into $LOGS/NAME.log, "exit seconds" into
# $LOGS/NAME.status. pytest's exit code 5 (no test selected) is no failure.
step() {
  local name="$1"; shift
  local started=$SECONDS
  "$@" >"$LOGS/$name.log" 2>&1; local rc=$?
  if [ $rc -eq 5 ] && [[ "$name" == pytest-* ]]; then
    echo "(no test selected)" >>"$LOGS/$name.log"; rc=0
  fi
  echo "$rc $((SECONDS - started))" >"$LOGS/$name.status"
}

# show NAME...: print each step's output and its result, in the order given.
show() {
  local name rc secs
  for name in "$@"; do
    [ -f "$LOGS/$name.status" ] || continue
    read -r rc secs <"$LOGS/$name.status"
    echo
    echo "==== $name"
    cat "$LOGS/$name.log"
    if [ "$rc" -eq 0 ]; then echo "==== $name: ok ($secs s)"
    else echo "==== $name: FAILED (exit $rc, $secs s)"; fi
  done
}

# pytest_pass NAME N PYTHON ARGS...: one pytest pass, its tests spread over N processes,
# except the Spark and Redis Cluster tests: each group shares one session fixture (a JVM,
# a three-node cluster), so they run in one process of their own beside the others
# (pytest-xdist's groups do not work with pytest 9). Without pyspark, no Spark tests.
# The tests go out one at a time (--maxschedchunk 1), the real worker processes' first
# (tests/conftest.py orders them): pytest-xdist's default hands each process a run of
# neighbouring tests in advance, and one process got the worker tests' minutes while the
# others had finished.
pytest_pass() {
  local name="$1"; shift
  step "$name" pytest_both "$name" "$@"
}
pytest_both() {
  local name="$1" n="$2" py="$3"; shift 3
  local own=(tests/cluster)
  "$py" -c "import pyspark" 2>/dev/null && own+=(tests/spark)
  # $LOGS/NAME-own.rc appears when that process is done (the next pass may start then).
  { "$py" -m pytest -q "${own[@]}" --junitxml="$LOGS/$name-own.xml" "$@" \
      >"$LOGS/$name-own.out" 2>&1
    echo $? >"$LOGS/$name-own.rc"; } &
  local spark=$!
  "$py" -m pytest -q -n "$n" --maxschedchunk 1 --ignore=tests/spark --ignore=tests/cluster \
    --junitxml="$LOGS/$name.xml" "$@"
  local rc=$?
  wait $spark; local rc_spark; rc_spark=$(cat "$LOGS/$name-own.rc")
  echo "---- ${own[*]} (one process):"
  cat "$LOGS/$name-own.out"
  if [ $rc -eq 5 ]; then rc=$rc_spark
  elif [ $rc_spark -ne 0 ] && [ $rc_spark -ne 5 ]; then rc=$rc_spark; fi
  return $rc
}

lint() {
  step ruff "$PY" -m ruff check django_delayq tests scripts/shape.py
  step mypy "$PY" -m mypy django_delayq
  if [ -f .importlinter ]; then
    step import-layers "$(dirname "$PY")/lint-imports" --no-cache
  fi
  step django-check "$PY" -m django check --settings=tests.settings
  step migrations "$PY" -m django makemigrations --check --dry-run --settings=tests.settings
}

# Django 6.x needs Python 3.12+: its passes run when one is installed.
PY6=$(scripts/find_python312.sh)
dj6_install() {
  { [ -x .venv-dj6/bin/python ] || "$PY6" -m venv .venv-dj6; } &&
  .venv-dj6/bin/python -m pip install -q --upgrade pip &&
  .venv-dj6/bin/python -m pip install -q -e ".[embedded]" "django>=6,<7" --group dev &&
  compiled .venv-dj6/bin/python
}
django6() {
  step django6-install dj6_install
  step tasks-conformance .venv-dj6/bin/python scripts/tasks_conformance.py
}

# Bytecode of our own modules, written once: each test starts hundreds of Python processes
# (worker subprocesses, their child processes, the example project), and each would
# otherwise compile the package's modules again where PYTHONDONTWRITEBYTECODE is set.
compiled() {
  "$1" -m compileall -q -j 0 django_delayq tests example_project scripts >/dev/null
}
compiled "$PY"

# Phase 1: the SQLite pass (every test), the linters and the Django 6.x install beside it.
lint &
lint_pid=$!
if [ -n "$PY6" ]; then django6 & dj6_pid=$!; fi
pytest_pass pytest-sqlite "$WORKERS" "$PY" &
sqlite_pid=$!

# Phase 2: the tests that depend on the database backend, on PostgreSQL, beside the tests
# that touch Django, on Django 6.x (the slow and first-pass-only ones run on SQLite only).
# The PostgreSQL pass, the longer of the two, starts as soon as the SQLite pass's own
# process (Spark, Redis Cluster) is done, a minute or more before its other processes
# are: its first tests (real worker processes, waiting more than computing) then run
# beside the SQLite pass's last ones in the place of that process. The Django 6.x pass
# starts once the SQLite pass is done, in the places of its processes (as many), and
# ends about when the PostgreSQL pass does: neither runs alone for long at the end,
# while the machine's cores would be idle.
while [ ! -e "$LOGS/pytest-sqlite-own.rc" ] && kill -0 "$sqlite_pid" 2>/dev/null; do
  sleep 1
done
if "$PY" scripts/pg_available.py; then
  echo "PostgreSQL reachable: the tests marked postgres run on it too"
  (export DELAYQ_TEST_DB=postgres; pytest_pass pytest-postgres "$WORKERS" "$PY" -m postgres) &
  pg_pid=$!
else
  echo "PostgreSQL not reachable: SQLite only"
fi
wait "$sqlite_pid"
wait "$lint_pid"
show ruff mypy import-layers django-check migrations pytest-sqlite

if [ -n "$PY6" ]; then
  echo "Django 6.x on $PY6: the tests marked django6 run there too"
  wait "$dj6_pid"
  pytest_pass pytest-django6 "$WORKERS" .venv-dj6/bin/python -m django6
else
  echo "no Python 3.12+ found: Django 6.x tests not run"
fi
[ -n "${pg_pid:-}" ] && wait "$pg_pid"
show django6-install tasks-conformance pytest-postgres pytest-django6

echo
echo "==== the 20 slowest tests (setup + call + teardown, every pass)"
"$PY" - "$LOGS"/pytest-*.xml <<'EOF'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

rows = [(float(case.get("time") or 0), Path(xml).stem.removeprefix("pytest-").removesuffix("-own"),
         "%s::%s" % (case.get("classname"), case.get("name")))
        for xml in sys.argv[1:] if Path(xml).exists()
        for case in ET.parse(xml).iter("testcase")]
for seconds, run, test in sorted(rows, reverse=True)[:20]:
    print("%7.1f s  %-9s %s" % (seconds, run, test))
print("each pass's two parts (wall time, tests): the later one decides when the pass ends")
for xml in sys.argv[1:]:
    if Path(xml).exists():
        suite = ET.parse(xml).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        print("%7.0f s  %-20s %s tests" % (float(suite.get("time") or 0), Path(xml).stem,
                                          suite.get("tests")))
EOF

echo
passed=() failed=()
for name in "${ORDER[@]}"; do
  [ -f "$LOGS/$name.status" ] || continue
  read -r rc secs <"$LOGS/$name.status"
  if [ "$rc" -eq 0 ]; then passed+=("$name ($secs s)"); else failed+=("$name"); fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null); wall time $((SECONDS - STARTED)) s"
echo "passed steps: ${passed[*]:-none}"
if [ -n "${DELAYQ_TEST_KEEP_LOGS:-}" ]; then echo "logs and junit XML kept in $LOGS"
else rm -rf "$LOGS"; fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED steps: ${failed[*]}"
  exit 1
fi
echo "all ${#passed[@]} steps passed"
