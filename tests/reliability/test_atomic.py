"""Exactly once for database effects, by force: atomic jobs through SIGKILLs and an empty
Redis.

Real ``delayq_worker`` subprocesses, the test database (SQLite, or PostgreSQL with
``DELAYQ_TEST_DB=postgres``), a private redis-server without persistence. Each job adds
one to a counter row and inserts a row keyed by its id (``tests/jobs_atomic.py``), then
takes a few milliseconds before its commit. Workers are SIGKILLed at random points of
the run (after a random number of further commits, so mid-transaction, between commit
and ack, or idle), and Redis is restarted once, empty, in the middle. At the end every
job row is final and succeeded, every counter equals its number of jobs, and no key row
is doubled: the writes of each job committed exactly once. ``bench/atomic_chaos.py`` is
the same run at 2,000 jobs, with ``atomic=False`` beside it. Under ``--processes``, a
hard time-limit kill rolls an atomic attempt's writes back.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import pytest

from django_delayq import JobSpec, schedule_many
from django_delayq.models import FINAL_STATUSES, Job, JobStatus
from tests import jobs_atomic
from tests.helpers import ALLOWED, point_at, wait_until
from tests.reliability.conftest import kill, stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]

LEASE = 1.5
FAST = {"LEASE_SECONDS": LEASE, "RECOVER_INTERVAL_SECONDS": 0.2,
        "RECONCILE_INTERVAL_SECONDS": 0.5, "RECONCILE_GRACE_SECONDS": 1,
        "ALLOWED_CALLABLES": [*ALLOWED, "tests.jobs_atomic"]}
JOBS = 300
COUNTERS = tuple("c%d" % i for i in range(6))
KILLS = 6


def _committed() -> int:
    return sum(jobs_atomic.counters().values())


def _open(ids: set[str]) -> int:
    return Job.objects.filter(pk__in=ids).exclude(status__in=FINAL_STATUSES).count()


def test_atomic_jobs_commit_once_through_kills_and_a_redis_restart(  # type: ignore[no-untyped-def]
        cfg, start_with, volatile_server) -> None:
    seed = int(os.environ.get("DELAYQ_TEST_SEED", time.time_ns() % 10**6))
    rng = random.Random(seed)
    point_at(cfg, volatile_server, **FAST)
    jobs_atomic.create_tables(COUNTERS)
    counter_of = [COUNTERS[i % len(COUNTERS)] for i in range(JOBS)]
    ids = schedule_many("tests.jobs_atomic.bump", [
        JobSpec(args=(name, rng.uniform(0.002, 0.03))) for name in counter_of],
        atomic=True, max_attempts=50)
    workers = [start_with(FAST, "--concurrency", "4") for _ in range(2)]
    restarted = False
    for n in range(KILLS):
        target = min(JOBS - 10, _committed() + rng.randint(5, JOBS // (KILLS + 2)))
        wait_until(lambda t=target: _committed() >= t, timeout=60, step=0.005)
        victim = workers.pop(rng.randrange(len(workers)))
        kill(victim)  # mid-transaction, between commit and ack, or idle: wherever it is
        workers.append(start_with(FAST, "--concurrency", "4"))
        if not restarted and n >= KILLS // 2:
            volatile_server.restart()  # no AOF, no RDB: every key is gone
            restarted = True
    wait_until(lambda: _open(set(ids)) == 0, timeout=120, step=0.1)
    for proc in workers:
        stop(proc)
    where = "seed %d" % seed
    statuses = Counter(Job.objects.filter(pk__in=ids).values_list("status", flat=True))
    assert statuses == {JobStatus.SUCCEEDED: JOBS}, (where, statuses)
    assert jobs_atomic.counters() == dict(Counter(counter_of)), where
    effects = jobs_atomic.effects()
    assert set(effects) == set(ids), where
    doubled = {job_id: n for job_id, n in effects.items() if n != 1}
    assert not doubled, (where, list(doubled.items())[:5])


def test_a_hard_time_limit_kill_rolls_an_atomic_attempt_back(  # type: ignore[no-untyped-def]
        cfg, start_with) -> None:
    """``--processes``: each attempt writes, then outlives its time limit and its process
    is killed. The atomic job's writes are gone with its transaction; the plain job's
    stay, once per attempt."""
    cfg.DELAYQ = {**cfg.DELAYQ, **FAST}
    jobs_atomic.create_tables(("atomic", "plain"))
    options = {"timeout": 1, "max_attempts": 2, "backoff": [0]}
    atomic = schedule_many("tests.jobs_atomic.bump", [JobSpec(args=("atomic", 120))],
                           atomic=True, **options)[0]
    plain = schedule_many("tests.jobs_atomic.bump", [JobSpec(args=("plain", 120))],
                          **options)[0]
    proc = start_with(FAST, "--processes", "1", "--concurrency", "1")
    wait_until(lambda: _open({atomic, plain}) == 0, timeout=120, step=0.1)
    stop(proc)
    rows = {row.pk: row for row in Job.objects.filter(pk__in=(atomic, plain))}
    for job_id in (atomic, plain):
        assert (rows[job_id].status, rows[job_id].attempts, rows[job_id].error_type) == (
            JobStatus.DEAD, 2, "django_delayq.exceptions.JobTimeout")
    assert jobs_atomic.counters() == {"atomic": 0, "plain": 2}
    assert jobs_atomic.effects() == {plain: 2}
