# Every target creates its own virtualenv and installs what it needs.
# `make example` runs the example shop; `make test` runs the whole test suite.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: example test test-fast shape lint bench bench-runtime bench-scale bench-compare chaos clean spark-cluster-demo

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[embedded,hiredis,tasks,postgres,prometheus,spark,cron]" --group dev
	touch $(STAMP)

# PORT=8001 for another port; fails (exit 1) when the port is taken.
example: $(STAMP)
	$(PY) example_project/run.py $(if $(PORT),--port $(PORT))

# Every step runs even after one fails; the summary names the failures (exit 1 if any) and
# the 20 slowest tests. DELAYQ_TEST_WORKERS=N: pytest processes per pass (default 3).
test: $(STAMP)
	bash scripts/test.sh $(PY)

# The quick loop: the tests of the package's layers (tests/<layer>/, tests/test_*.py) but
# Spark's, without real worker processes or slow tests; not the suites across the layers
# nor the example project. Over 3 pytest processes, stopping at the first failure.
test-fast: $(STAMP)
	$(PY) -m pytest -q -x -n 3 -m "not worker and not slow" tests --ignore=tests/cluster \
	  --ignore=tests/reliability --ignore=tests/security --ignore=tests/spark \
	  --ignore=tests/e2e --ignore=tests/test_example_project.py

# Code lines, longest import chain, imports inside functions, shared module names, bare Any.
shape: $(STAMP)
	$(PY) scripts/shape.py

lint: $(STAMP)
	$(PY) -m ruff check django_delayq tests
	$(PY) -m mypy django_delayq

bench: $(STAMP)
	$(PY) bench/foundation.py

# --processes 1 vs 2: drain of 20,000 no-op jobs, and 20 ms CPU-bound jobs vs threads.
bench-runtime: $(STAMP)
	$(PY) bench/runtime.py

# Six fault scenarios (about 3.5 min; DB=postgres for PostgreSQL at 127.0.0.1:5432), then
# kill -> re-run times over 6 kills (about 1.5 min), then 2,000 atomic jobs through 12
# kills and a Redis restart, with atomic=False beside them (about 1.5 min). All run; exit
# 1 if any failed.
chaos: $(STAMP)
	$(PY) bench/chaos.py $(if $(DB),--db $(DB)); a=$$?; \
	$(PY) bench/kill_rerun.py --kills 6; b=$$?; \
	$(PY) bench/atomic_chaos.py $(if $(DB),--db $(DB)); c=$$?; \
	test $$a -eq 0 && test $$b -eq 0 && test $$c -eq 0

# enqueue / schedule() / claim / cancel p50 and p99 at 10k, 100k, 1M pending; bytes per job.
bench-scale: $(STAMP)
	$(PY) bench/scale.py

bench-compare: $(STAMP)
	$(PY) bench/compare/run.py

# A local standalone Spark master and worker (127.0.0.1): bulk scheduling, export, report.
spark-cluster-demo: $(STAMP)
	$(PY) scripts/spark_cluster_demo.py

clean:
	rm -rf $(VENV) .venv-dj6 .pytest_cache example_project/.redis* example_project/db.sqlite3*
