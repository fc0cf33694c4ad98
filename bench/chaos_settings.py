"""Settings of the chaos run (``bench/chaos.py``) and of its worker subprocesses.

Environment: ``CHAOS_REDIS_URL``; ``CHAOS_DB`` = ``sqlite:/path/file`` or
``postgres:dbname`` (127.0.0.1, port ``PGPORT`` (5432; the chaos run's workers of the
database outage get its proxy's), user from ``PGUSER``, default postgres).
Short lease, recovery and reconcile intervals so that a 30 s run converges quickly;
``CHAOS_LEASE`` (seconds) shortens the lease further (the small run of the test suite).
``CHAOS_TICKS_DIR``: a 1-second periodic schedule (``chaos-tick``) appends each tick to
the file ``stamps`` of that directory (``tests.jobs_chaos.stamp_tick``), priority 10 so
that a scenario's backlog of due jobs does not make it late; unset (as in
``kill_rerun_settings``, which starts from these settings), no schedule.
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

_kind, _, _name = os.environ.get("CHAOS_DB", "sqlite:/tmp/delayq-chaos.sqlite3").partition(":")
if _kind == "postgres":
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": _name,
        "USER": os.environ.get("PGUSER", "postgres"),
        "HOST": os.environ.get("PGHOST", "127.0.0.1"), "PORT": os.environ.get("PGPORT", "5432"),
    }}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3", "NAME": _name,
        # WAL + NORMAL: a SIGKILLed process never corrupts or loses committed rows.
        "OPTIONS": {"timeout": 60, "transaction_mode": "IMMEDIATE",
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL"},
    }}

DELAYQ = {
    "REDIS_URL": os.environ.get("CHAOS_REDIS_URL", "redis://127.0.0.1:1/0"),
    "PREFIX": "chaos",
    "QUEUES": ["default"],
    "ALLOWED_CALLABLES": ["tests.jobs_chaos"],
    "LEASE_SECONDS": float(os.environ.get("CHAOS_LEASE") or 10.0),
    "WAKE_INTERVAL_SECONDS": 1.0,
    "RECOVER_INTERVAL_SECONDS": 0.5,
    "RECONCILE_INTERVAL_SECONDS": 2.0,
    "RECONCILE_GRACE_SECONDS": 3.0,
    "AUDIT_FLUSH_SECONDS": 0.05,
    "DEFAULT_MAX_ATTEMPTS": 25,
    "CONCURRENCY": 4,
}
if os.environ.get("CHAOS_TICKS_DIR"):
    DELAYQ["SCHEDULES"] = {"chaos-tick": {"callable": "tests.jobs_chaos.stamp_tick",
                                          "interval": 1, "priority": 10,
                                          "args": [os.environ["CHAOS_TICKS_DIR"]]}}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"t": {"format": "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "t"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"django_delayq.core.reconcile": {"level": "INFO"}},
}
