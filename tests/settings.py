"""Test settings: SQLite by default, PostgreSQL when DELAYQ_TEST_DB=postgres."""

from __future__ import annotations

import os

SECRET_KEY = "tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "tests.urls"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_delayq",
    "tests",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]

if os.environ.get("DELAYQ_TEST_DB") == "postgres":
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("DELAYQ_TEST_DBNAME", "test"),
        "USER": os.environ.get("PGUSER", "postgres"),
        "HOST": os.environ.get("PGHOST", "127.0.0.1"),
        "PORT": os.environ.get("PGPORT", "5432"),
        "TEST": {"NAME": "delayq_test_%d" % os.getpid()},
    }}
else:
    DATABASES = {"default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DELAYQ_TEST_SQLITE", "/tmp/delayq-tests.sqlite3"),
        "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE",
                    "init_command": "PRAGMA journal_mode=WAL;"},
        # A file, not :memory:, so that worker subprocesses see the test database.
        "TEST": {"NAME": "/tmp/delayq-test-%d.sqlite3" % os.getpid()},
    }}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The admin tests create a staff user each: PBKDF2's million rounds took 0.2-0.5 s of CPU
# per test (tests/admin alone: 54 s, 7 s with this), in each pass of make test.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STATIC_URL = "static/"
TASKS = {"default": {"BACKEND": "django_delayq.backends.DelayQBackend"}}
DELAYQ = {
    "REDIS_URL": os.environ.get("DELAYQ_REDIS_URL", "redis://127.0.0.1:1/0"),
    "PREFIX": os.environ.get("DELAYQ_TEST_PREFIX", "delayq"),
    "QUEUES": ["default", "emails", "slow"],
    "ALLOWED_CALLABLES": ["tests.jobs", "tests.jobs_more", "django_delayq.contrib.http"],
    "LEASE_SECONDS": float(os.environ.get("DELAYQ_TEST_LEASE", "10")),
    "WAKE_INTERVAL_SECONDS": 1.0,
    "AUDIT_FLUSH_SECONDS": 0.02,
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
