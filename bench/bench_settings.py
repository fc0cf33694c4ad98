"""Settings for the benchmarks: a private Redis (DELAYQ_REDIS_URL) and SQLite in BENCH_DIR,
or PostgreSQL when BENCH_DB=postgres (with Django's server-side binding when
BENCH_PG_SERVER_BINDING=1)."""

import os

SECRET_KEY = "bench"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_delayq",
                  "bench_jobs"]
if os.environ.get("BENCH_DB") == "postgres":
    DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql",
                             "NAME": os.environ.get("BENCH_PGDATABASE", "test"),
                             "USER": "postgres", "HOST": "127.0.0.1", "CONN_MAX_AGE": 600,
                             # Django's option: psycopg has the server bind the values
                             "OPTIONS": {"server_side_binding":
                                         os.environ.get("BENCH_PG_SERVER_BINDING") == "1"}}}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.path.join(os.environ.get("BENCH_DIR", "/tmp"), "bench.sqlite3"),
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE",
                    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
    }}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DELAYQ = {
    "REDIS_URL": os.environ["DELAYQ_REDIS_URL"],
    "ALLOWED_CALLABLES": ["bench_jobs"],
    "CLAIM_BATCH": int(os.environ.get("BENCH_CLAIM_BATCH", "200")),
    "AUDIT_BATCH": 2000,
    "EVENTS": os.environ.get("BENCH_EVENTS", "1") == "1",
}
