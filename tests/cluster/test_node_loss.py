"""A sharded queue on a real local Redis Cluster loses one node: only that node's shard
stops. The other shards' jobs keep being claimed, run and settled within a second of
their due time, ``schedule()`` into the lost shard returns at once (its rows wait in the
outbox), and once the node is back (empty: no persistence) every job of the lost shard
runs, each once."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_delayq import compat, pause_queue, schedule, schedule_many
from django_delayq.core.connection import get_engine
from django_delayq.core.options import JobSpec
from django_delayq.engine.shard_map import shard_name
from django_delayq.models import Job, JobStatus
from tests.cluster.conftest import running_worker, spread_prefix
from tests.helpers import wait_until
from tests.worker.conftest import worker_starter

if TYPE_CHECKING:
    from tests.cluster.server import LocalCluster

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]
SHARDS = 3
NAMES = tuple(shard_name("emails", i) for i in range(SHARDS))


@pytest.fixture
def sharded(settings, redis_cluster: LocalCluster):  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url,
                       "PREFIX": spread_prefix(redis_cluster, NAMES),
                       "QUEUE_OPTIONS": {"emails": {"shards": SHARDS}}}
    return settings


def _kill(cluster: LocalCluster, port: int) -> None:
    node = cluster.node(port)
    assert node.proc is not None
    node.proc.kill()  # SIGKILL: no goodbye to the other nodes or the clients
    node.proc.wait()
    node.proc = None


def _started_within(ids: list[str], seconds: float) -> None:
    """Every job of ``ids`` succeeded, each started within ``seconds`` of its due time."""
    rows = list(Job.objects.filter(pk__in=ids))
    assert len(rows) == len(ids)
    late = [(r.pk, r.lateness_ms()) for r in rows
            if r.status != JobStatus.SUCCEEDED or (r.lateness_ms() or 0) > seconds * 1000]
    assert not late, late


LATE_S = 5.0  # how late a healthy shard's job may start: room for a loaded machine


@pytest.mark.parametrize("lost", [2, 0])  # shard 0 also holds the queue's span record
def test_a_node_down_stops_only_its_shard_and_its_jobs_run_once_it_returns(  # type: ignore[no-untyped-def]
        sharded, redis_cluster: LocalCluster, tmp_path, lost: int) -> None:
    engine = get_engine()
    down = redis_cluster.node_of(engine.keys(NAMES[lost]).pending)
    assert len({redis_cluster.node_of(engine.keys(n).pending) for n in NAMES}) == SHARDS
    out = tmp_path / "runs.txt"
    with running_worker(("emails",), concurrency=4):
        # in one call: 60 calls of schedule() take seconds on a loaded machine, and the
        # first jobs came due (and ran) before the node was lost
        before = schedule_many("tests.jobs.record", [JobSpec(
            args=(str(out), "b%d" % i), delay=timedelta(seconds=2)) for i in range(60)],
            queue="emails")
        home = {job_id: engine.home_of("emails", job_id) for job_id in before}
        killed_at = timezone.now()
        _kill(redis_cluster, down)
        try:
            healthy = [job_id for job_id in before if home[job_id] != NAMES[lost]]
            wait_until(lambda: Job.objects.filter(
                pk__in=healthy, status=JobStatus.SUCCEEDED).count() == len(healthy), 20)
            # due after the kill: served on time (a busy machine makes them up to ~1.5 s
            # late; a shard held up by the lost node would hold them past the test's end)
            _started_within(healthy, LATE_S)
            assert engine.stats("emails").inflight == 0  # the lost shard left out
            during, took = [], []
            for i in range(60):  # the lost shard's stay in the outbox, at once
                began = time.monotonic()
                during.append(schedule("tests.jobs.record", str(out), "d%d" % i,
                                       queue="emails"))
                took.append(time.monotonic() - began)
            # no call waits on the lost node (a connect timeout a call would add up to a
            # minute here; a busy machine stretches a few calls, not all of them)
            assert sum(took) < 20 and max(took) < 3, took
            ok = [h.id for h in during if engine.home_of("emails", h.id) != NAMES[lost]]
            wait_until(lambda: Job.objects.filter(
                pk__in=ok, status=JobStatus.SUCCEEDED).count() == len(ok), 20)
            _started_within(ok, LATE_S)
            stranded = [job_id for job_id in before + [h.id for h in during]
                        if engine.home_of("emails", job_id) == NAMES[lost]]
            # none ran while its node was down (one that came due, was claimed and started
            # before the kill, on a machine too loaded for the 2 s above, ran then)
            assert stranded and not Job.objects.filter(
                pk__in=stranded, status=JobStatus.SUCCEEDED).exclude(
                    started_at__lt=killed_at).exists()
        finally:
            redis_cluster.restart(down)  # empty: its epoch key is gone
        # the loss pass when the node is back, not the normal pass after RECONCILE_GRACE
        # (60 s): the reconciler judges a shard set aside once it is used again
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 120, 45)
    runs = [line.split() for line in out.read_text().splitlines()]
    assert sorted(tag for tag, *_ in runs) == sorted(
        ["b%d" % i for i in range(60)] + ["d%d" % i for i in range(60)])  # each once


@pytest.fixture
def start_worker(sharded, tmp_path):  # type: ignore[no-untyped-def]
    yield from worker_starter(sharded, tmp_path, "tests.core.test_shards_settings")


def test_a_shard_lost_under_load_runs_no_unstarted_job_twice(  # type: ignore[no-untyped-def]
        sharded, redis_cluster: LocalCluster, start_worker, tmp_path) -> None:
    """Two worker processes drain a 3-shard queue; one shard's node is SIGKILLed mid-drain
    and comes back empty: both workers' reconcilers see the loss, and every job that had
    not started before it runs once (one that had may run again: its run's ack died with
    the node)."""
    total = int(os.environ.get("DELAYQ_TEST_LOSS_JOBS", "30000"))
    engine = get_engine()
    down = redis_cluster.node_of(engine.keys(NAMES[2]).pending)
    out = tmp_path / "runs.txt"
    schedule_many("tests.jobs.record", [JobSpec(args=(str(out), "j%d" % i))
                                        for i in range(total)], queue="emails")
    procs = [start_worker("--queues", "emails", "--concurrency", "4") for _ in range(2)]
    try:
        wait_until(lambda: out.exists() and _lines(out) > total // 4, timeout=120, step=0.05)
        _kill(redis_cluster, down)
        started = {line.split()[0] for line in out.read_text().splitlines()}
        wait_until(lambda: _lines(out) > len(started) + total // 10, timeout=60)
        redis_cluster.restart(down)  # empty: both reconcilers see the loss
        wait_until(lambda: Job.objects.filter(status=JobStatus.SUCCEEDED).count() == total,
                   timeout=150, step=0.5)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            assert proc.wait(60) == 0
    runs: dict[str, list[str]] = {}
    for tag, _id, attempt, _pid in (line.split() for line in out.read_text().splitlines()):
        runs.setdefault(tag, []).append(attempt)
    assert len(runs) == total
    twice = {t: a for t, a in runs.items() if len(a) > 1 and t not in started}
    assert not twice, (len(twice), list(twice.items())[:5])
    reused = {t: a for t, a in runs.items() if len(set(a)) < len(a)}  # a token run twice
    assert not reused, (len(reused), list(reused.items())[:5])


def _lines(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


ON_A_NODE = ("default", "slow", "", "limit:tests.jobs.noop", "limit:tests.jobs.add")
LIMITS = {"tests.jobs.noop": {"concurrency": 5}, "tests.jobs.add": {"rate_limit": "10/s"}}


def _placed(cluster: LocalCluster, lost: int, with_it: tuple[str, ...] = ()) -> str:
    """A prefix that spreads the shards of ``emails`` over the nodes, with the other data
    sets (``ON_A_NODE``: ``""`` is the workers registry) away from shard ``lost``'s node,
    but those of ``with_it`` on it."""
    for _ in range(3000):
        prefix = spread_prefix(cluster, NAMES)
        down = cluster.node_of("{%s:%s}" % (prefix, NAMES[lost]))
        if all((cluster.node_of("{%s%s}" % (prefix, ":" + n if n else "")) == down)
               == (n in with_it) for n in ON_A_NODE):
            return prefix
    raise RuntimeError("no prefix puts %r (only) with shard %d" % (with_it, lost))


@pytest.mark.parametrize("lost", [1, 0])  # shard 0 also holds the span record and the limit
def test_status_and_metrics_count_the_shards_that_answer(  # type: ignore[no-untyped-def]
        settings, redis_cluster: LocalCluster, lost: int) -> None:
    """docs/cluster.md, "What an operator sees during a node loss": ``delayq_status``
    (text and ``--json``) and the metrics go on counting a sharded queue's other shards
    while one shard's node is down."""
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url,
                       "PREFIX": _placed(redis_cluster, lost),
                       "QUEUE_OPTIONS": {"emails": {"shards": SHARDS}}}
    engine = get_engine()
    pause_queue("emails")  # nothing claims them: counts and the paused flag to check
    due = [schedule("tests.jobs.noop", queue="emails") for _ in range(30)]
    later = [schedule("tests.jobs.noop", queue="emails", delay=3600) for _ in range(30)]
    schedule("tests.jobs.noop", queue="slow", delay=3600)
    kept = {h.id for h in due + later if engine.home_of("emails", h.id) != NAMES[lost]}
    want = {"ready": len(kept.intersection(h.id for h in due)),
            "scheduled": len(kept.intersection(h.id for h in later))}
    assert 0 < want["ready"] < len(due) and 0 < want["scheduled"] < len(later)
    down = redis_cluster.node_of(engine.keys(NAMES[lost]).pending)
    # the node of keyless commands (TIME) too, as when the lost node is the first primary
    assert engine.client.set_default_node(engine.client.get_node("127.0.0.1", down))
    _kill(redis_cluster, down)
    try:
        out = StringIO()
        call_command("delayq_status", "--json", stdout=out)
        doc = json.loads(out.getvalue())
        emails = next(q for q in doc["queues"] if q["queue"] == "emails")
        assert {k: emails[k] for k in want} == want
        assert emails["paused"] and emails["oldest_overdue_id"] in kept
        assert next(q for q in doc["queues"] if q["queue"] == "slow")["scheduled"] == 1
        out = StringIO()
        call_command("delayq_status", stdout=out)
        line = next(s for s in out.getvalue().splitlines() if s.startswith("emails "))
        assert line.split()[1:3] == [str(want["scheduled"]), str(want["ready"])]
        if compat.prometheus_client is not None:
            from django_delayq.observe import prometheus

            text = prometheus.exposition()[0].decode()
            for state, n in want.items():
                assert 'delayq_queue_jobs{queue="emails",state="%s"} %d.0' % (state, n) in text
            assert 'delayq_queue_paused{queue="emails"} 1.0' in text
            assert "delayq_redis_up 1.0" in text
    finally:
        redis_cluster.restart(down)


def test_status_and_metrics_show_a_lost_nodes_queue_and_registry_unavailable(  # type: ignore[no-untyped-def]
        settings, redis_cluster: LocalCluster) -> None:
    """A queue that is not sharded and the workers registry on the lost node: the
    command and the metrics show them unavailable, and the rest as usual."""
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url,
                       "PREFIX": _placed(redis_cluster, 2, ("default", "", ON_A_NODE[3])),
                       "QUEUE_OPTIONS": {"emails": {"shards": SHARDS}},
                       "CALLABLE_LIMITS": LIMITS}
    engine = get_engine()
    later = [schedule("tests.jobs.noop", queue="emails", delay=3600) for _ in range(30)]
    schedule("tests.jobs.noop", queue="slow", delay=3600)
    schedule("tests.jobs.noop", queue="default", delay=3600)
    kept = sum(engine.home_of("emails", h.id) != NAMES[2] for h in later)
    down = redis_cluster.node_of(engine.keys(NAMES[2]).pending)
    _kill(redis_cluster, down)
    try:
        out = StringIO()
        call_command("delayq_status", "--json", stdout=out)
        doc = json.loads(out.getvalue())
        found = {q["queue"]: q for q in doc["queues"]}
        assert (found["emails"]["scheduled"], found["slow"]["scheduled"]) == (kept, 1)
        assert found["default"]["scheduled"] is None
        # the node's own error, not when this process tries it again
        assert "Connection refused" in found["default"]["unavailable"]
        assert "tried again" not in found["default"]["unavailable"]
        assert (found["default"]["paused"], found["default"]["waiting"]) == (None, 0)
        assert found["slow"]["unavailable"] is None and doc["workers"] == []
        assert "Connection refused" in doc["workers_unavailable"]
        limited = {c["callable"]: c for c in doc["callable_limits"]}
        assert "Connection refused" in limited["tests.jobs.noop"]["unavailable"]
        assert (limited["tests.jobs.noop"]["running"],
                limited["tests.jobs.noop"]["started_in_window"]) == (None, None)
        assert (limited["tests.jobs.add"]["running"], limited["tests.jobs.add"]["unavailable"]
                ) == (0, None)
        out = StringIO()
        call_command("delayq_status", stdout=out)
        text = out.getvalue()
        assert re.search(r"^default +unavailable: Error 111 connecting to .*Connection refused",
                         text, re.M), text
        assert re.search(r"^emails +%d +0 " % kept, text, re.M), text
        assert "  registry unavailable: " in text
        assert "PAUSED: none (unknown: default)" in text
        assert re.search(r"^  tests.jobs.noop +5 at once +unavailable: ", text, re.M), text
        if compat.prometheus_client is not None:
            from django_delayq.observe import prometheus

            metrics = prometheus.exposition()[0].decode()
            assert 'state="scheduled"} %d.0' % kept in metrics
            assert 'queue="slow",state="scheduled"} 1.0' in metrics
            assert 'delayq_queue_jobs{queue="default"' not in metrics
            assert "delayq_redis_up 1.0" in metrics
            assert "\ndelayq_workers " not in metrics
            assert 'delayq_callable_running{callable="tests.jobs.add"} 0.0' in metrics
            assert 'delayq_callable_running{callable="tests.jobs.noop"}' not in metrics
            assert 'delayq_callable_concurrency_limit{callable="tests.jobs.noop"} 5.0' in metrics
    finally:
        redis_cluster.restart(down)


@pytest.mark.skipif(compat.prometheus_client is None, reason="the prometheus extra")
def test_the_workers_gauge_counts_on_the_redis_clock_when_no_queue_answers(  # type: ignore[no-untyped-def]
        settings, redis_cluster: LocalCluster) -> None:
    """Every queue on the lost node, the registry on another: ``delayq_workers`` counts the
    workers heard from within two leases on the Redis clock (not one silent for an hour)."""
    from django_delayq.observe import prometheus

    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url, "QUEUES": ["default"],
                       "PREFIX": _placed(redis_cluster, 0, ("default",))}
    engine = get_engine()
    engine.register_worker("fresh", "{}")
    engine.register_worker("silent", "{}")
    registry = engine.global_keys.workers
    engine.client.zadd(registry, {"silent": engine.time_ms() - 3_600_000})
    down = redis_cluster.node_of(engine.keys("default").pending)
    alive = redis_cluster.node_of(registry)
    assert engine.client.set_default_node(engine.client.get_node("127.0.0.1", alive))
    _kill(redis_cluster, down)
    try:
        metrics = prometheus.exposition()[0].decode()
        assert 'delayq_queue_jobs{queue="default"' not in metrics
        assert "delayq_redis_up 1.0" in metrics
        assert "\ndelayq_workers 1.0" in metrics, metrics
    finally:
        redis_cluster.restart(down)
