"""``schedule_many``'s rows: ``batch()`` checks each spec and makes its row, inserted in
bulk by ``row_insert.insert_many`` (one ``executemany`` per 1,000 rows; on PostgreSQL
without keys, one ``COPY``), no model instances made, and one Redis call per 1,000 jobs.
The call's options are checked once (``JobOptions.check``) and a spec's own per spec
(``Checked.over``: its run-time options, key and due time); its row is made as
``schedule()`` makes one (``Checked.new``: the arguments' JSON, their binding to the
function's signature, the payload's size, the id). Redis gets ids, due times, priorities and groups only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from django.db import connections

from django_delayq.core import options, row_insert
from django_delayq.models import Job

if TYPE_CHECKING:
    from django_delayq.engine.outcomes import NewJob


def existing(using: str, ids: Collection[str], batch_size: int = 1000) -> set[str]:
    """Which of ``ids`` already have a row (SQLite: one query, the ids as a JSON array)."""
    conn = connections[using]
    ops = conn.ops
    sql = "SELECT %s FROM %s WHERE %s IN (%%s)" % (
        ops.quote_name("id"), ops.quote_name(Job._meta.db_table), ops.quote_name("id"))
    chunk = list(ids)
    found: set[str] = set()
    with conn.cursor() as cursor:
        if conn.vendor == "sqlite":
            cursor.execute(sql % "SELECT value FROM json_each(%s)", [json.dumps(chunk)])
            return {row[0] for row in cursor.fetchall()}
        size = min(batch_size, conn.features.max_query_params or batch_size)
        for i in range(0, len(chunk), size):
            part = chunk[i:i + size]
            cursor.execute(sql % ", ".join(["%s"] * len(part)), part)
            found.update(row[0] for row in cursor.fetchall())
    return found


def batch(using: str, specs: Iterable[options.JobSpec], call: options.Checked, *,
          max_payload: int, batch_size: int) -> tuple[list[str], list[NewJob], Callable[[], None]]:
    """Each spec checked and made a row: every spec's id, the jobs to send and the INSERT
    of their rows (to run in the transaction). Keyed jobs that exist already are left out,
    so that replaying the same input adds nothing."""
    rows: list[dict[str, Any]] = []
    jobs: list[NewJob] = []
    keyed: list[str] = []
    for spec in specs:
        job = call.over(spec)  # the job's options: the call's, with those it sets
        row, new = job.new(spec.args, spec.kwargs, max_payload)
        rows.append(row)
        jobs.append(new)
        if job.key is not None:
            keyed.append(new.id)
    job_ids = [job.id for job in jobs]
    if keyed and (found := existing(using, keyed, batch_size)):
        keep = [i for i, job in enumerate(jobs) if job.id not in found]
        rows, jobs = [rows[i] for i in keep], [jobs[i] for i in keep]
    return job_ids, jobs, partial(row_insert.insert_many, rows, using,
                                  ignore_conflicts=bool(keyed), batch_size=batch_size)
