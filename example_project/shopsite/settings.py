"""Example shop settings: SQLite, and Redis from DELAYQ_REDIS_URL, else the embedded
redis-server that run.py (``make example``) started and whose URL it wrote to
``.redis/url`` (``SHOP_REDIS_DIR/url``). manage.py refuses to run with neither."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_delayq",
    "shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "shopsite.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DATABASES = {"default": {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": os.environ.get("SHOP_DB", str(BASE_DIR / "db.sqlite3")),
    # WAL + IMMEDIATE: the web server and the worker write at the same time.
    "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"



def _redis_url() -> str | None:
    if os.environ.get("DELAYQ_REDIS_URL"):
        return os.environ["DELAYQ_REDIS_URL"]
    url_file = Path(os.environ.get("SHOP_REDIS_DIR") or BASE_DIR / ".redis") / "url"
    return url_file.read_text().strip() if url_file.exists() else None


DELAYQ = {
    "REDIS_URL": _redis_url(),
    "QUEUES": ["default"],
    "ALLOWED_CALLABLES": ["shop.tasks"],
    # Periodic jobs, synced into the admin's Schedules at worker start (docs/periodic.md).
    "SCHEDULES": {"nightly-unpaid-report": {"callable": "shop.tasks.nightly_unpaid_report",
                                            "cron": "0 2 * * *", "timezone": "Europe/Berlin"},
                  "restock-check": {"callable": "shop.tasks.restock_check", "interval": 120}},
}
UNPAID_ORDER_TIMEOUT_SECONDS = float(os.environ.get("SHOP_TIMEOUT", "20"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"django_delayq": {"handlers": ["console"], "level": "INFO", "propagate": False},
                "shop": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}
