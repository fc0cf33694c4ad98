"""``python -m tests.worker.retention_rounds ARGS``: ``manage.py delayq_worker ARGS`` with
retention's rounds ``ROUND_S`` apart instead of ``retention.INTERVAL_S`` (20 s, a module
constant, not a setting): the real-worker retention test then does not wait out the
production pause before the first round. Everything else is the worker as deployed."""

from __future__ import annotations

import sys

import django

ROUND_S = 1.0

if __name__ == "__main__":
    django.setup()
    from django.core.management import execute_from_command_line

    from django_delayq.worker import retention

    retention.INTERVAL_S = ROUND_S  # read when the worker builds its Retention
    execute_from_command_line(["manage.py", "delayq_worker", *sys.argv[1:]])
