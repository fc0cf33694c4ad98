"""The operator's calls while one node of a real local Redis Cluster is down: the node
of queue ``plain`` (not sharded) and of shard ``hot#2`` (or ``hot#0``), the others of ``hot`` on
the two nodes that answer (docs/cluster.md, "Sharded queues"). ``delayq_queue list``
lists what answers and names what does not, ``paused_queues()`` names the queues whose
state is unknown, and ``cancel()`` of a job there raises without cancelling it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from io import StringIO
from typing import TYPE_CHECKING, TypeVar

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from redis.exceptions import ConnectionError as RedisConnectionError

from django_delayq import (
    CancelOutcome,
    PausedUnknown,
    cancel,
    pause_queue,
    paused_queues,
    run_now,
    schedule,
)
from django_delayq.core.connection import get_engine
from django_delayq.engine.shard_health import ERRORS, ShardDown
from django_delayq.engine.shard_map import shard_name
from django_delayq.models import Job, JobStatus
from tests.conftest import unique_prefix
from tests.helpers import wait_until

if TYPE_CHECKING:
    from tests.cluster.server import LocalCluster

pytestmark = [pytest.mark.django_db(transaction=True)]
HOT = tuple(shard_name("hot", i) for i in range(3))
_T = TypeVar("_T")


def _prefix(cluster: LocalCluster, lost: int) -> str:
    """A fresh prefix under which ``plain`` and ``hot#<lost>`` share a node, the other two
    shards of ``hot`` each one of the two others."""
    for _ in range(1000):
        prefix = unique_prefix()
        plain, *shards = (cluster.node_of("{%s:%s}" % (prefix, q)) for q in ("plain", *HOT))
        if plain == shards[lost] and len({plain, *shards}) == 3:
            return prefix
    raise RuntimeError("no prefix puts plain and hot#%d on one node" % lost)


@pytest.fixture
def down(request, settings, redis_cluster: LocalCluster) -> Iterator[int]:  # type: ignore[no-untyped-def]
    """The port of the node of ``plain`` and ``hot#2`` (or the shard ``request.param``
    names), killed (SIGKILL) by the test, restarted (empty) after it."""
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": redis_cluster.url,
                       "PREFIX": _prefix(redis_cluster, getattr(request, "param", 2)),
                       "QUEUES": ["plain", "hot"], "DEFAULT_QUEUE": "plain",
                       "QUEUE_OPTIONS": {"hot": {"shards": 3}}}
    port = redis_cluster.node_of(get_engine().keys("plain").pending)
    node = redis_cluster.node(port)
    yield port
    if node.proc is None:
        redis_cluster.restart(port)


def _kill(cluster: LocalCluster, port: int) -> None:
    node = cluster.node(port)
    assert node.proc is not None
    node.proc.kill()
    node.proc.wait()
    node.proc = None


def _list(*queues: str) -> tuple[str, str]:
    """``delayq_queue list`` 's output, and the error it ended with ("" without one)."""
    out = StringIO()
    try:
        call_command("delayq_queue", "list", *queues, stdout=out)
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), ""


@pytest.mark.parametrize("down", [2, 0], indirect=True)  # shard 0 also holds the span record
def test_list_shows_every_queue_that_answers_and_names_the_others(  # type: ignore[no-untyped-def]
        down: int, redis_cluster: LocalCluster) -> None:
    lost = HOT.index(next(n for n in HOT if redis_cluster.node_of(get_engine().keys(n).pending)
                          == down))
    schedule("tests.jobs.noop", queue="hot", delay=3600)
    _kill(redis_cluster, down)
    text, error = _list()
    assert re.search(r"^plain +unavailable: Error 111 connecting to .*Connection refused",
                     text, re.M), text
    assert re.search(r"^hot +active \(hot#%d unreachable\) " % lost, text, re.M), text
    assert error == "Redis is unavailable for plain, hot#%d: the list above leaves it out" % lost
    with pytest.raises(CommandError, match=r"pause of queue 'hot' reached 2 of 3 shards "):
        call_command("delayq_queue", "pause", "hot", stdout=StringIO())
    text, error = _list("hot")  # paused where it answers; the lost shard's flag unknown
    assert re.search(r"^hot +paused \(hot#%d unreachable\) " % lost, text, re.M), text
    assert error == "Redis is unavailable for hot#%d: the list above leaves it out" % lost
    redis_cluster.restart(down)  # empty: the shard lost its pause, the database keeps it
    wait_until(lambda: _list()[1] == "", 15)  # the shard tried again: it answers
    text, _ = _list()
    assert "unavailable" not in text and "unreachable" not in text, text
    assert re.search(r"^hot +partly paused: 2 of 3 shards; paused in the database ",
                     text, re.M), text


def test_paused_queues_names_the_queues_whose_node_is_down(  # type: ignore[no-untyped-def]
        down: int, redis_cluster: LocalCluster) -> None:
    assert pause_queue("hot")
    _kill(redis_cluster, down)
    for _ in range(2):  # the node's error, then while its queue is set aside: the same
        with pytest.raises(PausedUnknown, match=r"^whether queue\(s\) plain are paused is "
                           r"unknown: plain \(Error 111 .*; paused among the others: hot$"
                           ) as caught:
            paused_queues()
        assert isinstance(caught.value, RedisConnectionError)
        assert caught.value.paused == ["hot"]  # hot#0 and hot#1 answer: paused
        assert list(caught.value.unknown) == ["plain"]
        assert "Connection refused" in caught.value.unknown["plain"]
    redis_cluster.restart(down)  # empty: hot#2 lost its pause (the reconciler writes it back)
    wait_until(lambda: _answered(paused_queues) == [], 15)  # hot: partly paused


def test_a_cancel_into_a_down_node_raises_shard_down_and_cancels_nothing(  # type: ignore[no-untyped-def]
        down: int, redis_cluster: LocalCluster) -> None:
    engine = get_engine()
    plain = schedule("tests.jobs.noop", queue="plain", delay=3600)
    hot = next(h for h in (schedule("tests.jobs.noop", queue="hot", delay=3600)
                           for _ in range(200)) if engine.home_of("hot", h.id) == HOT[2])
    due = {h.id: Job.objects.get(pk=h.id).run_at for h in (plain, hot)}
    _kill(redis_cluster, down)
    for handle, where in ((plain, "queue 'plain'"), (hot, "shard 'hot#2'")):
        for _ in range(3):  # the first try (the node's error) as the next ones
            with pytest.raises(ShardDown, match=r"^%s is unavailable \(Error 111 " % where):
                cancel(handle.id)
        with pytest.raises(ShardDown, match=r"^%s is unavailable \(" % where):
            run_now(handle.id)  # the other calls on one job alike
        row = Job.objects.get(pk=handle.id)
        assert (row.status, row.run_at) == (JobStatus.SCHEDULED, due[handle.id])  # as it was
    redis_cluster.restart(down)
    for handle in (plain, hot):  # run again once the node answers: cancelled
        wait_until(lambda: _answered(lambda: cancel(handle.id)) == CancelOutcome.CANCELLED, 15)  # noqa: B023
        assert Job.objects.get(pk=handle.id).status == JobStatus.CANCELLED


def _answered(call: Callable[[], _T]) -> _T | None:
    """``call()``, None while its node is still set aside (or not back in the cluster)."""
    try:
        return call()
    except ERRORS:
        return None


def test_list_on_one_redis_that_is_down_lists_nothing_and_exits_1(settings) -> None:  # type: ignore[no-untyped-def]
    """One Redis (not a cluster) that does not answer: Redis is unavailable as a whole,
    nothing is listed, ``paused_queues()`` raises its error."""
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    out = StringIO()
    with pytest.raises(CommandError, match=r"^Redis is unavailable: Error 111 ") as caught:
        call_command("delayq_queue", "list", stdout=out)
    assert (out.getvalue(), caught.value.returncode) == ("", 1)
    with pytest.raises(RedisConnectionError, match=r"^Error 111 ") as raised:
        paused_queues()
    assert not isinstance(raised.value, PausedUnknown)
