#!/usr/bin/env bash
# The whole test suite, step by step: every step runs even when an earlier one failed,
# a summary names the failed steps, and the exit code is non-zero if any failed.
# `make test` calls this after creating .venv; it takes the interpreter as $1.
set -u
cd "$(dirname "$0")/.."
PY="${1:-.venv/bin/python}"
failed=()
passed=()

step() {
  local name="$1"; shift
  echo
  echo "==== $name: $*"
  local started=$SECONDS
  "$@"; local rc=$?
  if [ $rc -eq 0 ]; then
    passed+=("$name")
    echo "==== $name: ok ($((SECONDS - started)) s)"
  else
    failed+=("$name")
    echo "==== $name: FAILED (exit $rc, $((SECONDS - started)) s)"
  fi
}

step ruff "$PY" -m ruff check django_delayq tests
step mypy "$PY" -m mypy django_delayq
if [ -f .importlinter ]; then
  step import-layers "$(dirname "$PY")/lint-imports" --no-cache
fi
step django-check "$PY" -m django check --settings=tests.settings
step migrations "$PY" -m django makemigrations --check --dry-run --settings=tests.settings
step pytest-sqlite "$PY" -m pytest -q

if "$PY" scripts/pg_available.py; then
  echo "PostgreSQL reachable: running the database tests on it too"
  # The slow runs (minutes of real workers) ran in the SQLite pass above.
  step pytest-postgres env DELAYQ_TEST_DB=postgres "$PY" -m pytest -q -m "not slow" \
    tests/django tests/worker tests/security tests/spark/test_bulk.py \
    tests/spark/test_rows_columns.py tests/reliability/test_atomic.py
else
  echo "PostgreSQL not reachable: SQLite only"
fi

# Django 6.x needs Python 3.12+: run the Django-facing tests there when one is installed.
PY6=$(scripts/find_python312.sh)
if [ -n "$PY6" ]; then
  echo "Django 6.x on $PY6"
  dj6_install() {
    { [ -x .venv-dj6/bin/python ] || "$PY6" -m venv .venv-dj6; } &&
    .venv-dj6/bin/python -m pip install -q --upgrade pip &&
    .venv-dj6/bin/python -m pip install -q -e ".[embedded]" "django>=6,<7" --group dev
  }
  step django6-install dj6_install
  # The engine's 100,000-job SLOWLOG test does not depend on Django, and the slow runs of
  # real workers do not depend on its version: they ran above.
  step pytest-django6 .venv-dj6/bin/python -m pytest -q -m "not script_bounds and not slow" \
    tests/django tests/worker tests/engine tests/security
  step tasks-conformance .venv-dj6/bin/python scripts/tasks_conformance.py
else
  echo "no Python 3.12+ found: Django 6.x tests not run"
fi

echo
echo "passed steps: ${passed[*]:-none}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED steps: ${failed[*]}"
  exit 1
fi
echo "all ${#passed[@]} steps passed"
