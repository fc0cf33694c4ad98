"""``manage.py delayq_status``: counts, due times, workers, --watch, --json, --follow."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from io import StringIO

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError

from django_delayq import schedule
from django_delayq.core import events
from django_delayq.core.connection import get_engine
from django_delayq.testing import run_due_jobs
from tests.helpers import wait_until
from tests.worker.conftest import ROOT, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def _status(*args: str) -> str:
    out = StringIO()
    call_command("delayq_status", *args, stdout=out)
    return out.getvalue()


def _by_queue(doc: dict) -> dict:  # type: ignore[type-arg]
    return {q["queue"]: q for q in doc["queues"]}


def test_counts_next_due_and_oldest_overdue(delayq_engine):
    schedule("tests.jobs.boom", max_attempts=1)
    run_due_jobs()  # -> dead
    overdue = schedule("tests.jobs.noop").id
    schedule("tests.jobs.noop", delay=3)
    schedule("tests.jobs.noop", delay=3600)
    schedule("tests.jobs.noop", queue="emails")
    delayq_engine.claim("emails", 10, lease_ms=60_000)  # -> in flight
    time.sleep(0.05)
    doc = json.loads(_status("--json"))
    queues = _by_queue(doc)
    default, emails, slow = queues["default"], queues["emails"], queues["slow"]
    assert (default["scheduled"], default["ready"], default["inflight"], default["dead"]) == (
        2, 1, 0, 1)
    assert (emails["scheduled"], emails["ready"], emails["inflight"], emails["dead"]) == (
        0, 0, 1, 0)
    assert 1.5 < default["next_due_in_s"] <= 3.0
    assert default["next_due"].endswith("+00:00")
    assert default["oldest_overdue_id"] == overdue and default["oldest_overdue_s"] >= 0.05
    assert slow["next_due"] is None and slow["oldest_overdue_id"] is None
    assert doc["workers"] == [] and doc["prefix"] == delayq_engine.prefix


def test_text_output_and_queue_selection(delayq_engine):
    overdue = schedule("tests.jobs.noop", queue="emails").id
    text = _status("--queues", "emails")
    assert "QUEUE" in text and "SCHEDULED" in text and "IN FLIGHT" in text and "DUE NOW" in text
    [row] = [line for line in text.splitlines() if line.startswith("emails")]
    assert row.split()[1:5] == ["0", "1", "0", "0"] and overdue in row
    assert "default" not in text.split("WORKERS")[0].split("QUEUE", 1)[1]
    assert "none registered" in text
    with pytest.raises(CommandError, match="unknown queue"):
        _status("--queues", "nope")


def test_watch_refreshes_until_count(delayq_engine):
    schedule("tests.jobs.noop", delay=60)
    text = _status("--watch", "--interval", "0.05", "--count", "3")
    assert text.count("delayq status at") == 3
    lines = _status("--watch", "--json", "--interval", "0.05", "--count", "2").splitlines()
    assert [_by_queue(json.loads(line))["default"]["scheduled"] for line in lines] == [1, 1]


@pytest.mark.parametrize("args, said", [
    (["--watch", "--count", "0"], "--count must be >= 1, not 0"),
    (["--watch", "--count", "-1"], "--count must be >= 1, not -1"),
    (["--follow", "--count", "0"], "--count must be >= 1, not 0"),
    (["--follow", "--last", "-5"], "--last must be >= 0, not -5"),
    (["--watch", "--interval", "0"], "--interval must be > 0, not 0.0"),
    (["--watch", "--interval", "nan"], "--interval must be > 0, not nan"),
    (["--count", "3"], "--count 3 goes with --watch or --follow"),
    (["--last", "2"], "--last 2 goes with --follow"),
    (["--watch", "--last", "2"], "--last 2 goes with --follow, not --watch"),
    (["--interval", "5"], "--interval 5.0 goes with --watch"),
    (["--follow", "--interval", "5"], "--interval 5.0 goes with --watch, not --follow"),
    (["--queues", ","], "--queues ',' names no queue"),
    (["--queues", " , "], "--queues ' , ' names no queue"),
])
def test_an_option_it_would_ignore_or_cannot_take_is_refused(delayq_engine, args, said):
    """Refused before anything is shown, naming the option and its value (they printed
    nothing and exited 0, or were ignored, or showed every queue)."""
    out = StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("delayq_status", *args, stdout=out)
    assert str(refused.value) == said and out.getvalue() == ""


def test_redis_down_is_a_command_error(delayq_settings):
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    with pytest.raises(CommandError, match="Redis is unavailable"):
        _status()


def test_one_redis_down_fails_at_once_even_with_a_sharded_queue(delayq_settings, caplog):
    """On one Redis (not a cluster) the failing read of the paused flags means Redis is
    unavailable: no read of each queue's shards follows, nothing speaks of other nodes."""
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "REDIS_URL": "redis://127.0.0.1:1/0",
                              "QUEUE_OPTIONS": {"hot": {"shards": 3}}}
    with pytest.raises(CommandError, match="Redis is unavailable"):
        _status()
    assert "other nodes" not in caplog.text


def test_an_error_redis_answers_fails_the_command(delayq_engine):
    """A queue's limit key of the wrong type is no outage: the command fails as a whole (it
    does not show that queue as unavailable)."""
    delayq_engine.client.set(delayq_engine.keys("default").limit, "not a hash")
    with pytest.raises(CommandError, match="WRONGTYPE"):
        _status("--json")


def _start(settings, tmp_path, name: str, *args: str) -> subprocess.Popen[bytes]:  # type: ignore[no-untyped-def]
    log = open(tmp_path / ("%s.log" % name), "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "django", "delayq_worker", "--worker-id", name, *args],
        cwd=ROOT, env=worker_env(settings), stdout=log, stderr=subprocess.STDOUT)


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.worker
def test_live_workers_with_heartbeat_age(delayq_settings, delayq_engine, tmp_path):
    client = redis.Redis.from_url(delayq_settings.DELAYQ["REDIS_URL"])
    registry = "{%s}:workers" % delayq_engine.prefix
    client.zadd(registry, {"old-host:1:gone": delayq_engine.time_ms() - 3_600_000})
    a = _start(delayq_settings, tmp_path, "wa", "--queues", "default")
    b = _start(delayq_settings, tmp_path, "wb", "--queues", "emails,slow")
    try:
        wait_until(lambda: client.zcard(registry) == 3, timeout=90)  # two Djangos starting
        doc = json.loads(_status("--json"))
        # a worker's id is its --worker-id plus a token of its process start
        workers = {w["id"].split(":")[0] if w["id"].startswith("w") else w["id"]: w
                   for w in doc["workers"]}
        assert set(workers) == {"wa", "wb", "old-host:1:gone"}
        assert workers["wa"]["info"]["name"] == "wa"
        assert workers["wa"]["info"]["queues"] == ["default"]
        assert workers["wb"]["info"]["queues"] == ["emails", "slow"]
        assert not workers["wa"]["stale"] and workers["wa"]["heartbeat_age_s"] < 10
        assert workers["old-host:1:gone"]["stale"]
        assert workers["old-host:1:gone"]["heartbeat_age_s"] >= 3599
        text = _status()
        assert "WORKERS (3)" in text and "(STALE)" in text
    finally:
        _stop(a, b)
    assert client.zrange(registry, 0, -1) == [b"old-host:1:gone"]  # both unregistered


@pytest.mark.worker
def test_follow_tails_the_events_of_every_worker(delayq_settings, delayq_engine, tmp_path):
    first = schedule("tests.jobs.add", 1, 1).id
    second = schedule("tests.jobs.add", 2, 2, queue="emails").id
    events.flush()
    out = StringIO()
    # 2 past "scheduled" events, then the end of each job (a fast job's "started" is
    # folded into its "succeeded"), from two workers
    follow = threading.Thread(target=call_command, daemon=True, args=(
        "delayq_status", "--follow", "--json", "--last", "2", "--count", "4"),
        kwargs={"stdout": out})
    follow.start()
    a = _start(delayq_settings, tmp_path, "wa", "--queues", "default")
    b = _start(delayq_settings, tmp_path, "wb", "--queues", "emails")
    try:
        follow.join(timeout=120)  # two Djangos starting on a busy machine
        assert not follow.is_alive(), out.getvalue()
    finally:
        _stop(a, b)
    seen = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e["event"], e["job"]) for e in seen[:2]] == [("scheduled", first),
                                                          ("scheduled", second)]
    # Two more events from the two workers: each job's "succeeded" (with its "started"
    # folded in), or its own "started" when the job straddled a flush.
    tail = [(e["event"], e["job"], e.get("worker")) for e in seen[2:]]
    assert all(ev in ("started", "succeeded") for ev, _, _ in tail), tail
    # a worker's id is its name plus a token of its process start
    assert {(job, worker.rsplit(":", 1)[0]) for _, job, worker in tail} <= {
        (first, "wa"), (second, "wb")}
    # each job's first event here (its "started", or its "succeeded" with it folded in)
    # has the lateness; a "succeeded" after its own "started" has not
    firsts: dict[str, dict[str, str]] = {}
    for e in seen[2:]:
        firsts.setdefault(e["job"], e)
    assert all("lateness_ms" in e for e in firsts.values()), seen
    ids = [e["id"] for e in seen]
    assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))


def test_follow_text_lines(delayq_engine):
    job_id = schedule("tests.jobs.boom", "kaput", max_attempts=1).id
    stream = events.get_stream()
    assert stream is not None
    # The run's two events in one batch, as a flush tick finds a fast job's: on a busy
    # machine the flusher's tick could fall between them (started then has its own entry).
    with stream._flushing:
        run_due_jobs()
    events.flush()
    text = _status("--follow", "--last", "2", "--count", "2")
    lines = text.splitlines()
    assert [line.split()[1] for line in lines] == ["scheduled", "dead"]  # started: folded
    assert all(job_id in line for line in lines)
    assert "error_type=builtins.RuntimeError error=kaput" in lines[1]
    assert "lateness_ms=" in lines[1]


def _hot_shards(settings, shards: int) -> list[str]:  # type: ignore[no-untyped-def]
    """The event streams of a queue "hot" of ``shards`` shards (the prefix's left out)."""
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"hot": {"shards": shards}}}
    streams = get_engine().event_streams()
    assert len(streams) == 1 + shards
    return streams[1:]


def _planted(job: str) -> dict[str, str]:
    return {"event": "started", "queue": "hot", "job": job, "ts_ms": "1000"}


def test_follow_reads_each_shards_stream_after_its_own_last_entry(delayq_settings):
    """Two streams' ids are in no one order (each node's clock, and a count of its own
    within a millisecond): an entry of one shard's stream with a lower id than the last
    entry read from another shard's stream is still shown."""
    first, second = _hot_shards(delayq_settings, 2)
    client = get_engine().client
    client.xadd(first, _planted("on-first"), id="1000-5")
    out = StringIO()
    follow = threading.Thread(target=call_command, daemon=True, args=(
        "delayq_status", "--follow", "--json", "--last", "1", "--count", "2"),
        kwargs={"stdout": out})
    follow.start()
    wait_until(lambda: "on-first" in out.getvalue(), timeout=60)  # read: its cursor set
    client.xadd(second, _planted("on-second"), id="1000-3")  # same ms, lower sequence
    follow.join(timeout=60)
    assert not follow.is_alive(), out.getvalue()
    seen = [(e["id"], e["job"]) for e in map(json.loads, out.getvalue().splitlines())]
    assert seen == [("1000-5", "on-first"), ("1000-3", "on-second")]


def _xread_calls(client) -> int:  # type: ignore[no-untyped-def]
    return int(client.info("commandstats").get("cmdstat_xread", {}).get("calls", 0))


def test_read_events_merges_the_streams_by_id_in_one_xread_a_read(delayq_settings):
    """On one Redis every stream is read with one XREAD; the entries come merged by id,
    named with their stream, in order across reads of ``count`` each."""
    streams = _hot_shards(delayq_settings, 3)
    engine = get_engine()
    planted = {streams[0]: ["5-1", "5-2", "7-0", "9-0"], streams[1]: ["5-0", "8-0"],
               streams[2]: ["6-0"]}
    for key, ids in planted.items():
        for entry_id in ids:
            engine.client.xadd(key, _planted(entry_id), id=entry_id)
    cursors = dict.fromkeys(engine.event_streams(), "0-0")
    read: list[tuple[str, str]] = []
    xreads = _xread_calls(engine.client)
    for _ in range(4):
        for key, entry_id, fields in engine.read_events(cursors, block_ms=100, count=2):
            cursors[key] = entry_id.decode()
            read.append((key, fields[b"job"].decode()))
    assert _xread_calls(engine.client) - xreads == 4  # one a read, not one a stream
    assert read == sorted(((k, i) for k, ids in planted.items() for i in ids),
                          key=lambda e: tuple(map(int, e[1].split("-"))))
    assert engine.read_events(cursors, block_ms=100, count=2) == []


def test_malformed_worker_info_is_shown_not_a_crash(delayq_settings, delayq_engine):
    # Anything with access to Redis can write the registry: plant what no worker writes.
    client = redis.Redis.from_url(delayq_settings.DELAYQ["REDIS_URL"])
    registry = "{%s}:workers" % delayq_engine.prefix
    now = delayq_engine.time_ms()
    planted = {
        b"w-json": b"{not json",
        b"w-list": b"[1, 2]",
        b"w-deep": b"[" * 100_000 + b"]" * 100_000,
        b"w-types": json.dumps({"queues": 5, "running": {"a": [1]},
                                "processed": "\x1b[2Jwiped"}).encode(),
        b"w-bytes": b"\xff\xfe{",
        b"\xffw-\x1b]0;owned\x07": b"{}",
    }
    client.zadd(registry, dict.fromkeys(planted, now))
    client.hset(registry + ":info", mapping=planted)
    text = _status()
    assert "WORKERS (6)" in text
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("  w")}
    assert "info malformed (not JSON)" in rows["w-json"]
    assert "info malformed (not a JSON object but list)" in rows["w-list"]
    assert "info malformed (200000 bytes, over the registry's read limit" in rows["w-deep"]
    assert "info malformed (not JSON)" in rows["w-bytes"]
    assert "queues=5 running={'a': [1]} prefetched=- processed=\\x1b[2Jwiped" in rows["w-types"]
    assert "\ufffdw-\\x1b]0;owned\\x07" in text
    assert "\x1b" not in text and "\x07" not in text
    workers = {w["id"]: w for w in json.loads(_status("--json"))["workers"]}
    assert workers["w-list"]["info"] == {} and workers["w-list"]["info_error"].startswith("not")
    assert workers["w-types"]["info"]["queues"] == 5 and workers["w-types"]["info_error"] is None


def test_follow_escapes_control_characters_from_job_errors(delayq_settings, delayq_engine):
    hostile = "\x1b[2J\x1b]0;owned\x07\x1b[31mred\rover\u202eevil"
    job_id = schedule("tests.jobs.boom", hostile, max_attempts=1).id
    run_due_jobs()
    events.flush()
    client = redis.Redis.from_url(delayq_settings.DELAYQ["REDIS_URL"])
    client.xadd(events.stream_key(delayq_engine.prefix), {
        "event": "dead\x1b[8m", "job": "planted", "ts_ms": "9" * 30, "error": "\x1b[?1049h"})
    text = _status("--follow", "--last", "3", "--count", "3")
    lines = text.splitlines()
    assert len(lines) == 3 and all(job_id in line for line in lines[:2])
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "\u202e" not in text
    assert ("error_type=builtins.RuntimeError error=\\x1b[2J\\x1b]0;owned\\x07\\x1b[31mred"
            "\\rover\\u202eevil") in lines[1]
    assert "dead\\x1b[8m" in lines[2] and "error=\\x1b[?1049h" in lines[2]
    doc = [json.loads(line) for line in _status("--follow", "--json", "--last", "3",
                                                "--count", "3").splitlines()]
    assert hostile in doc[1]["error"]  # JSON keeps the text, escaped by JSON itself


def test_paused_queues_and_queue_and_callable_limits(delayq_engine, settings):
    settings.DELAYQ = {**settings.DELAYQ, "CALLABLE_LIMITS": {
        "tests.jobs.add": {"rate_limit": "10/s", "concurrency": 2}}}
    delayq_engine.pause("emails")
    delayq_engine.set_queue_limit("default", rate=(100, 60_000), concurrency=5)
    doc = json.loads(_status("--json"))
    queues = _by_queue(doc)
    assert doc["paused"] == ["emails"]
    assert queues["emails"]["paused"] and not queues["default"]["paused"]
    assert queues["default"]["limit"] == {"rate": [100, 60_000], "concurrency": 5}
    assert queues["emails"]["limit"] is None
    [limit] = doc["callable_limits"]
    assert limit == {"callable": "tests.jobs.add", "rate": [10, 1000], "concurrency": 2,
                     "running": 0, "started_in_window": 0, "unavailable": None}
    text = _status()
    assert "PAUSED: emails" in text
    assert "  limit: 100/m, 5 at once" in text
    assert "tests.jobs.add" in text.split("CALLABLE LIMITS", 1)[1]
    assert "10/s, 2 at once" in text


def test_running_jobs_of_a_limited_callable_are_counted(delayq_engine, settings):
    settings.DELAYQ = {**settings.DELAYQ, "CALLABLE_LIMITS": {
        "tests.jobs.add": {"concurrency": 2}}}
    grant = delayq_engine.acquire("tests.jobs.add", "01a", lease_ms=60_000, rate=None,
                                  concurrency=2)
    assert grant.granted
    [limit] = json.loads(_status("--json"))["callable_limits"]
    assert limit["running"] == 1
    delayq_engine.release_callable("tests.jobs.add", ["01a"])
    [limit] = json.loads(_status("--json"))["callable_limits"]
    assert limit["running"] == 0


def test_processes_and_running_jobs_with_their_age(delayq_engine):
    now = delayq_engine.time_ms()
    info = {"host": "h", "pid": 7, "queues": ["default"], "supervisor": "sup-1",
            "processes": 3, "running": 1, "processed": 9,
            "jobs": [{"id": "01running", "queue": "default", "callable": "tests.jobs.noop",
                      "started_ms": now - 90_000}, {"id": 5}, "junk",
                     {"id": "01evil\x1b[2J", "queue": "q", "callable": "x\x07"}]}
    delayq_engine.register_worker("w-sup", json.dumps(info))
    [worker] = json.loads(_status("--json"))["workers"]
    assert worker["processes"] == 3
    assert [j["id"] for j in worker["jobs"]] == ["01running", "01evil\x1b[2J"]
    assert 89 <= worker["jobs"][0]["age_s"] < 100 and worker["jobs"][1]["age_s"] is None
    text = _status()
    assert "processes=3" in text
    assert re.search(r"running 01running tests\.jobs\.noop \(default\) for 9\d\.\ds", text)
    assert "01evil\\x1b[2J" in text and "\x1b" not in text and "\x07" not in text


@pytest.mark.worker
def test_a_supervised_worker_shows_its_processes_and_running_job(delayq_settings,
                                                                 delayq_engine, tmp_path):
    gate = tmp_path / "gate"  # the job runs until the test creates it
    job_id = schedule("tests.jobs.report_then_wait", 1, str(gate)).id
    proc = _start(delayq_settings, tmp_path, "sup", "--queues", "default", "--processes", "2")

    def running() -> list[dict]:  # type: ignore[type-arg]
        return [w for w in json.loads(_status("--json"))["workers"]
                if any(j["id"] == job_id for j in w["jobs"])]

    try:
        wait_until(lambda: len(running()) == 1, timeout=60)
        [worker] = running()
        assert worker["processes"] == 2
        [job] = [j for j in worker["jobs"] if j["id"] == job_id]
        assert job["callable"] == "tests.jobs.report_then_wait" and job["queue"] == "default"
        assert job["age_s"] is not None and 0 <= job["age_s"] < 60
        text = _status()
        assert re.search(r"running %s tests\.jobs\.report_then_wait \(default\) for "
                         r"[\d.]+s" % job_id, text)
        assert "processes=2" in text
    finally:
        gate.touch()  # the drain waits for the running job
        _stop(proc)
