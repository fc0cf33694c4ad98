"""Time the admin's job list on a big table (docs/performance.md, "The admin's job list").

    PYTHONPATH=$PWD python bench/admin_list.py --rows 1000000 [--db /tmp/x.sqlite3]

Fills a scratch SQLite database (``--db``, kept between runs: filled once, only up to
``--rows``) with finished and waiting jobs over a year of creation times, then loads
``/admin/django_delayq/job/`` as a superuser a few times, unfiltered, on a later page
and filtered by status, printing each load's time and the slowest queries of the first.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

CHUNK = 20_000
STATUSES = ["succeeded"] * 8 + ["dead", "cancelled", "scheduled", "retrying"]


def _fill(rows: int) -> None:
    from django.db import connection, transaction

    from django_delayq.models import Job

    have = Job.objects.count()
    start = time.time() - 365 * 86400
    rng = random.Random(7)
    columns = ("id, queue, callable_path, args, kwargs, status, run_at, created_at, "
               "updated_at, attempts, max_attempts, error_type, last_error, traceback, "
               "worker_id, cancel_requested, priority, task_backend, parents_left, "
               '"group", atomic')
    sql = "INSERT INTO django_delayq_job (%s) VALUES (%s)" % (columns, ", ".join(["%s"] * 21))
    while have < rows:
        batch = []
        for i in range(have, min(rows, have + CHUNK)):
            at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(start + i * 365 * 86400 / rows))
            batch.append(("bench%021d" % i, rng.choice(["default", "emails"]),
                          "tests.jobs.noop", "[]", "{}", rng.choice(STATUSES), at, at, at, 1,
                          3, "", "", "", "", False, 0, "", 0, "", False))
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, batch)
        have += len(batch)
        print("rows: %d" % have, file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--db", default="/tmp/delayq-admin-bench.sqlite3")
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    os.environ["DELAYQ_TEST_SQLITE"] = options.db
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    call_command("migrate", verbosity=0)
    _fill(options.rows)
    user = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", password="pw")
    client = Client()
    client.force_login(user)
    for label, query in (("first page", ""), ("page 150", "?p=150"),
                         ("status=dead", "?status__exact=dead")):
        times = []
        for run in range(options.runs):
            with CaptureQueriesContext(connection) as captured:
                t0 = time.perf_counter()
                response = client.get("/admin/django_delayq/job/" + query)
                times.append(time.perf_counter() - t0)
            assert response.status_code == 200, response.status_code
            if run == 0 and label == "first page":
                slowest = sorted(captured.captured_queries, key=lambda q: -float(q["time"]))
                for q in slowest[:4]:
                    print("  %6.3f s  %s" % (float(q["time"]), q["sql"][:150]))
        print("%-12s %s s" % (label, ", ".join("%.3f" % t for t in times)))


if __name__ == "__main__":
    main()
