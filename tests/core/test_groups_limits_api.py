"""Group limits from the API, the settings and ``delayq_queue limit``: an override is a
row and a Redis field, written at commit, checked at the call; the settings' defaults
are checked by ``manage.py check``; after a Redis loss the reconciler writes both back
from the rows and the settings."""

from __future__ import annotations

import logging
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import InterfaceError, transaction
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from django_delayq import (
    GroupOverride,
    InvalidJob,
    clear_group_limit,
    group_limits,
    schedule,
    set_group_limit,
)
from django_delayq.core import group_limits as group_limits_module
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.group_limits import sync
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import GroupLimit, Job
from django_delayq.testing import run_worker
from django_delayq.worker.gates import QueueGate
from django_delayq.worker.loop import Worker

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_override_is_a_row_and_a_redis_field(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    got = set_group_limit("default", "acme", concurrency=3, rate_limit="10/s")
    assert got == GroupOverride(queue="default", group="acme", concurrency=3,
                                rate_limit="10/s")
    set_group_limit("default", "bob", concurrency=1)
    assert group_limits("default") == [got, GroupOverride(queue="default", group="bob",
                                                          concurrency=1)]
    assert delayq_engine.group_limit_overrides("default") == {"acme": "10 1000 3",
                                                              "bob": "-1 -1 1"}
    assert clear_group_limit("default", "acme") and not clear_group_limit("default", "acme")
    assert delayq_engine.group_limit_overrides("default") == {"bob": "-1 -1 1"}
    assert list(GroupLimit.objects.values_list("group", flat=True)) == ["bob"]


def test_an_override_reaches_redis_when_its_transaction_commits(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuntimeError), transaction.atomic():
        set_group_limit("default", "acme", concurrency=3)
        raise RuntimeError("rolled back")
    assert delayq_engine.group_limit_overrides("default") == {}
    assert not GroupLimit.objects.exists()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"concurrency": 0}, "concurrency must be an integer >= 1, not 0"),
    ({"concurrency": "3"}, "concurrency must be an integer >= 1, not '3'"),
    ({"concurrency": True}, "concurrency must be an integer >= 1, not True"),
    ({"rate_limit": "ten/s"}, "rate_limit must be a rate such as '10/s'.*not 'ten/s'"),
    ({"rate_limit": "0/s"}, "not '0/s'"),
    ({}, "needs a concurrency, a rate_limit or both"),
    # beyond what the row's column holds (PostgreSQL's integer, SQLite's 64 bits)
    ({"concurrency": 2**31}, "concurrency must be an integer >= 1, at most 2147483647, "
                             "not 2147483648"),
    ({"concurrency": 10**20}, "at most 2147483647, not 100000000000000000000"),
    ({"rate_limit": "1" * 30 + "/s"}, "at most 2147483647.*not '1{30}/s'"),
])
def test_bad_values_are_refused_naming_them(delayq_engine, kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=message):
        set_group_limit("default", "acme", **kwargs)
    assert not GroupLimit.objects.exists()


def test_a_rate_is_kept_as_written_canonically(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    got = set_group_limit("default", "acme", rate_limit=" 60 / 60s " + " " * 30)
    assert got.rate_limit == "60/m"
    assert GroupLimit.objects.get().rate_limit == "60/m"  # fits its column, whatever the input
    assert delayq_engine.group_limit_overrides("default") == {"acme": "60 60000 -1"}


def test_names_are_checked(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="nowhere"):
        set_group_limit("nowhere", "acme", concurrency=1)
    with pytest.raises(InvalidJob, match="group"):
        clear_group_limit("default", "")
    with pytest.raises(ValueError, match="control characters"):  # InvalidJob is one
        set_group_limit("default", "a\tb", concurrency=1)


@pytest.mark.parametrize(("entry", "message"), [
    ({"group_concurrency": 0}, "['default']['group_concurrency'] must be an integer >= 1, "
                               "not 0"),
    ({"group_rate_limit": "fast"}, "['default']['group_rate_limit'] must be a rate such as "
                                   "'10/s'"),
    ({"group_concurrency": 10**16}, "['default']['group_concurrency'] must be an integer >= 1, "
                                    "at most 2147483647, not 10000000000000000"),
])
def test_bad_settings_name_the_key_and_the_value(settings, entry, message) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"default": entry}}
    with pytest.raises(ImproperlyConfigured) as info:
        get_settings()
    assert message in str(info.value)


def test_a_sharded_queue_takes_no_group_limit(settings, delayq_engine) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ,
                       "QUEUE_OPTIONS": {"default": {"shards": 2, "group_concurrency": 2}}}
    with pytest.raises(ImproperlyConfigured, match="group_concurrency=2"):
        get_settings()
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"default": {"shards": 2}}}
    with pytest.raises(InvalidJob, match="sharded"):
        set_group_limit("default", "acme", concurrency=1)


def test_the_workers_write_the_settings_defaults(settings, delayq_engine) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {
        "default": {"group_concurrency": 2, "group_rate_limit": "5/10s"}}}
    QueueGate(get_engine(), get_settings()).write_limit("default")
    raw = get_engine().client.hgetall(get_engine().keys("default").limit)
    assert raw == {b"group_concurrency": b"2", b"group_rate": b"5", b"group_per_ms": b"10000"}


def test_a_redis_loss_gets_its_limits_back_from_the_rows(settings, delayq_engine) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ,
                       "QUEUE_OPTIONS": {"default": {"group_concurrency": 2}}}
    engine, s = get_engine(), get_settings()
    QueueGate(engine, s).write_limit("default")
    set_group_limit("default", "acme", concurrency=5)
    set_group_limit("default", "bob", rate_limit="3/m")
    handle = schedule("tests.jobs.noop", group="acme")
    engine.client.flushdb()  # the loss: Redis forgot everything
    assert engine.group_limit_overrides("default") == {}
    Reconciler(engine, s, ("default",)).run_all(grace_seconds=0, assume_lost=True)
    assert engine.group_limit_overrides("default") == {"acme": "-1 -1 5",
                                                       "bob": "3 60000 -1"}
    assert engine.client.hgetall(engine.keys("default").limit) == {b"group_concurrency": b"2"}
    assert engine.inspect("default", handle.id).place == "pending"  # and the job, grouped
    assert engine.client.hget(engine.keys("default").group, handle.id) == b"acme"


def test_the_reconciler_makes_redis_agree_with_the_rows(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    set_group_limit("default", "acme", concurrency=5)
    engine = get_engine()
    engine.set_group_limit("default", "stale", rate=None, concurrency=1)  # no row: dropped
    engine.set_group_limit("default", "acme", rate=None, concurrency=9)  # the row wins
    GroupLimit.objects.create(queue="default", group="late", concurrency=4)  # Redis missed it
    Reconciler(engine, get_settings(), ("default",)).run_all(grace_seconds=0)
    assert engine.group_limit_overrides("default") == {"acme": "-1 -1 5", "late": "-1 -1 4"}


def test_an_override_written_by_hand_under_a_name_not_utf8_is_removed_once(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    key = delayq_engine.keys("default").group_limits
    delayq_engine.client.hset(key, b"\xffbad", "1 1 1")  # no group's name: no row has it
    s = get_settings()
    assert sync(delayq_engine, s, ["default"]) == 1
    assert delayq_engine.client.hgetall(key) == {}
    assert sync(delayq_engine, s, ["default"]) == 0  # not again at every pass


def test_the_command_sets_lists_and_clears_a_group_limit(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    out = StringIO()
    call_command("delayq_queue", "limit", "default", "--group", "acme", "--concurrency", "3",
                 "--rate", "10/s", stdout=out)
    call_command("delayq_queue", "list", "default", stdout=out)
    call_command("delayq_queue", "unlimit", "default", "--group", "acme", stdout=out)
    text = out.getvalue()
    assert "default: group acme limited to concurrency 3, rate 10/s" in text
    assert "default: group limits: acme (concurrency 3, rate 10/s)" in text
    assert "default: group acme back to the queue's group limits" in text
    assert delayq_engine.group_limit_overrides("default") == {}
    out = StringIO()
    call_command("delayq_queue", "unlimit", "default", "--group", "acme", stdout=out)
    assert "default: group acme had no limits of its own" in out.getvalue()


def test_the_command_refuses_bad_values_naming_them(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="not 'x/s'"):
        call_command("delayq_queue", "limit", "default", "--group", "acme", "--rate", "x/s")
    with pytest.raises(CommandError, match="--group"):
        call_command("delayq_queue", "limit", "default", "--concurrency", "3")
    with pytest.raises(CommandError, match="--concurrency and --rate go with limit"):
        call_command("delayq_queue", "pause", "default", "--group", "acme", "--concurrency", "3")
    with pytest.raises(CommandError, match="of group 'acme' of default"):
        call_command("delayq_queue", "purge", "default", "--group", "acme")


def test_defaults_reach_the_claim(settings, delayq_engine) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"default": {"group_concurrency": 1}}}
    engine = get_engine()
    QueueGate(engine, get_settings()).write_limit("default")
    for _ in range(3):
        schedule("tests.jobs.noop", group="acme")
    assert len(engine.claim("default", 10, 60_000).jobs) == 1
    assert engine.group_slots("default") == {"acme": 1}


def test_a_worker_writes_the_rows_limits_before_its_first_claim(settings, delayq_engine,  # type: ignore[no-untyped-def]
                                                                tmp_path) -> None:
    """A Redis without the overrides (a new PREFIX, lost data) and a worker starting on
    it: its first claim already keeps a group's override, not the queue's default."""
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"default": {"group_concurrency": 3}}}
    GroupLimit.objects.create(queue="default", group="acme", concurrency=1)  # not in Redis
    assert get_engine().group_limit_overrides("default") == {}
    ids = [schedule("tests.jobs.sleep_then_record", str(tmp_path / "runs"), "x", 0.3,
                    group="acme").id for _ in range(3)]
    assert run_worker(concurrency=3) == 3
    rows = sorted(Job.objects.filter(id__in=ids).values_list("started_at", "finished_at"))
    assert all(later[0] >= earlier[1] for earlier, later in zip(rows, rows[1:])), rows


def test_a_first_start_on_an_empty_redis_reports_no_loss(settings, delayq_engine,  # type: ignore[no-untyped-def]
                                                          caplog) -> None:
    """The limits written before the first claim are the settings' first write, not a
    restore: no "missing from Redis" warning (an operator's sign of a data loss)."""
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"default": {"rate_limit": "100/s"}}}
    schedule("tests.jobs.noop")
    caplog.set_level(logging.INFO)
    assert run_worker() == 1
    assert not [r for r in caplog.records if "missing from Redis" in r.getMessage()]


@pytest.mark.parametrize("error", [InterfaceError("connection already closed"),
                                   RedisClusterException("cluster not reachable")])
def test_a_failing_limits_write_at_start_does_not_stop_the_worker(delayq_engine, monkeypatch,  # type: ignore[no-untyped-def]
                                                                   error) -> None:
    def boom(queues: object) -> None:
        raise error

    monkeypatch.setattr(group_limits_module, "by_queue", boom)
    schedule("tests.jobs.noop")
    assert run_worker() == 1


def test_one_queue_failing_at_start_costs_the_others_nothing(delayq_engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A queue whose limit cannot be written at start (say, a shard's node is down) leaves
    the other queues' overrides written before the first claim all the same."""
    GroupLimit.objects.create(queue="default", group="acme", concurrency=1)  # not in Redis
    write = QueueGate.write_limit

    def fails_for_emails(self: QueueGate, queue: str) -> None:
        if queue == "emails":
            raise RedisClusterException("node down")
        write(self, queue)

    monkeypatch.setattr(QueueGate, "write_limit", fails_for_emails)
    seen: list[dict[str, str]] = []
    monkeypatch.setattr(Worker, "_loop", lambda self: seen.append(
        get_engine().group_limit_overrides("default")) or 0)
    run_worker(queues=["emails", "default"])
    assert seen == [{"acme": "-1 -1 1"}]


def test_a_stalled_redis_at_start_costs_one_wait_not_one_a_queue(delayq_engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    asked: list[str] = []

    def times_out(self: QueueGate, queue: str) -> None:
        asked.append(queue)
        raise RedisTimeoutError("Timeout reading from socket")

    monkeypatch.setattr(QueueGate, "write_limit", times_out)
    monkeypatch.setattr(Worker, "_loop", lambda self: 0)
    run_worker(queues=["emails", "default", "slow"])
    assert asked == ["emails"]
