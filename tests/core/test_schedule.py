"""schedule(): the row in the caller's transaction, Redis on commit, InvalidJob on bad input."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from zoneinfo import ZoneInfo

import pytest
from django.db import transaction
from django.utils import timezone

from django_delayq import InvalidJob, cancel, schedule
from django_delayq.core import payloads
from django_delayq.core.api import JobSpec, requeue, reschedule, run_now, schedule_many
from django_delayq.engine import CancelOutcome
from django_delayq.engine.engine import MoveOutcome
from django_delayq.engine.envelope import Envelope
from django_delayq.models import Job, JobStatus
from tests import jobs, jobs_more

pytestmark = pytest.mark.django_db(transaction=True)
NEVER_RUN = r"expires=\S+ is not after the job's due time \S+: it could never run"


def in_redis(engine, job_id: str, queue: str = "default") -> str:  # type: ignore[no-untyped-def]
    return engine.inspect(queue, job_id).place


def test_schedule_writes_row_and_only_the_id_to_redis(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    h = schedule(jobs.add, 1, 2, delay=dt.timedelta(minutes=30), max_attempts=4)
    row = Job.objects.get(pk=h.id)
    assert (row.callable_path, row.args, row.kwargs) == ("tests.jobs.add", [1, 2], {})
    assert row.status == JobStatus.SCHEDULED and row.max_attempts == 4
    assert abs((row.run_at - timezone.now()).total_seconds() - 1800) < 5
    loc = delayq_engine.inspect("default", h.id)
    assert loc.place == "pending"
    assert loc.envelope is None  # the payload lives in the row, read back at claim time
    assert not delayq_engine.client.exists(delayq_engine.keys("default").jobs)
    claimed = payloads.load(delayq_engine.claim("default", 10, 60_000, now_ms=10**14).jobs)
    assert [(j.id, j.envelope, j.payload) for j in claimed] == [
        (h.id, "", Envelope(path="tests.jobs.add", args=[1, 2], max_attempts=4))]
    assert abs(loc.score_ms - (delayq_engine.time_ms() + 1_800_000)) < 5000


def test_schedule_at_aware_datetime(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    at = timezone.now() + dt.timedelta(hours=2)
    h = schedule("tests.jobs.noop", at=at)
    assert delayq_engine.inspect("default", h.id).score_ms == int(at.timestamp() * 1000)


def test_an_aware_at_without_use_tz_is_stored_as_time_zone_wall_time(delayq_engine,
                                                                     settings) -> None:  # type: ignore[no-untyped-def]
    """``USE_TZ=False``: an aware ``at`` (and ``expires``) is the instant it names: Redis
    gets its epoch milliseconds and the row its wall time in ``TIME_ZONE``, the naive time
    Django stores, whichever way in (SQLite refuses an aware datetime then: the row
    insert raised its own ``ValueError``). One that has no wall time there is refused."""
    from django_delayq import job, schedule_spec

    settings.USE_TZ, settings.TIME_ZONE = False, "America/New_York"
    at = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(hours=2)
    wall = at.astimezone(ZoneInfo("America/New_York")).replace(tzinfo=None)
    expires = at + dt.timedelta(hours=1)
    with timezone.override("Asia/Tokyo"):  # an active zone is not the one rows are in
        ids = [schedule(jobs.noop, at=at, expires=expires).id,
               schedule_spec(jobs.noop, JobSpec(at=at)).id,
               *schedule_many(jobs.noop, [JobSpec(at=at)]),
               *job(jobs.noop).using(at=at).schedule_many([JobSpec(), JobSpec(at=at)]),
               job(jobs.noop).using(at=at).schedule().id]
    later = schedule(jobs.noop, delay=60).id
    assert reschedule(later, at=at) is MoveOutcome.MOVED
    for job_id in [*ids, later]:
        row = Job.objects.get(pk=job_id)
        assert row.run_at == wall and (row.scheduled_for == wall or job_id == later)
        assert delayq_engine.inspect("default", job_id).score_ms == int(at.timestamp() * 1000)
    assert Job.objects.get(pk=ids[0]).expires_at == wall + dt.timedelta(hours=1)
    first = dt.datetime(1, 1, 1, 1, tzinfo=dt.UTC)  # 8 p.m. on the eve of year 1 in New York
    for move in (lambda: schedule(jobs.noop, at=first), lambda: reschedule(later, at=first),
                 lambda: schedule_many(jobs.noop, [JobSpec(at=first)])):
        with pytest.raises(InvalidJob, match=r"at=0001-01-01T01:00:00\+00:00 has no wall time "
                                             "in TIME_ZONE 'America/New_York'"):
            move()
    assert Job.objects.count() == len(ids) + 1 and Job.objects.get(pk=later).run_at == wall
    assert delayq_engine.inspect("default", later).score_ms == int(at.timestamp() * 1000)


def test_job_reaches_redis_only_after_commit(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        h = schedule("tests.jobs.noop")
        assert in_redis(delayq_engine, h.id) == ""
    assert in_redis(delayq_engine, h.id) == "pending"


def test_rollback_schedules_nothing(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction.atomic():
        h = schedule("tests.jobs.noop")
        raise Boom
    assert not Job.objects.filter(pk=h.id).exists()
    assert in_redis(delayq_engine, h.id) == ""


def test_key_makes_schedule_idempotent(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    a = schedule("tests.jobs.noop", key="order-7", delay=60)
    b = schedule("tests.jobs.noop", key="order-7", delay=5)
    assert a.id == b.id and Job.objects.count() == 1
    with transaction.atomic():
        c = schedule("tests.jobs.noop", key="order-7")
        Job.objects.filter(pk="nope").exists()  # the transaction is still usable
    assert c.id == a.id


def test_explicit_backoff_list_sets_max_attempts(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop", backoff=[15, 180, 600, 1800, 3600])
    assert h.job.max_attempts == 6 and h.job.backoff == [15, 180, 600, 1800, 3600]


def test_cancel_before_start(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop", delay=60)
    assert h.cancel() is CancelOutcome.CANCELLED
    assert h.status == JobStatus.CANCELLED
    assert in_redis(delayq_engine, h.id) == ""
    assert cancel(h.id) is CancelOutcome.NOT_FOUND


def test_cancel_inside_the_scheduling_transaction_sticks(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        h = schedule("tests.jobs.noop", delay=60)
        assert cancel(h.id) is CancelOutcome.CANCELLED
    assert in_redis(delayq_engine, h.id) == ""
    assert h.status == JobStatus.CANCELLED


def test_cancel_running_job_marks_row(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop")
    delayq_engine.claim("default", 1, 10_000)
    assert cancel(h.id) is CancelOutcome.ALREADY_RUNNING
    assert h.job.cancel_requested is True


def test_reschedule_run_now_and_requeue(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop", delay=3600)
    assert run_now(h.id) is MoveOutcome.MOVED
    assert delayq_engine.inspect("default", h.id).score_ms <= delayq_engine.time_ms()
    assert reschedule(h.id, delay=120) is MoveOutcome.MOVED
    assert abs((h.job.run_at - timezone.now()).total_seconds() - 120) < 5
    [c] = delayq_engine.claim("default", 1, 1000, now_ms=delayq_engine.time_ms() + 200_000).jobs
    delayq_engine.nack("default", [(c.id, c.token, None)])
    Job.objects.filter(pk=h.id).update(status=JobStatus.DEAD)
    again = requeue(h.id)
    assert again.id == h.id and h.job.status == JobStatus.SCHEDULED
    assert delayq_engine.inspect("default", h.id).place == "pending"
    Job.objects.filter(pk=h.id).update(status=JobStatus.SUCCEEDED)
    copy = requeue(h.id)
    assert copy.id != h.id and copy.job.callable_path == "tests.jobs.noop"


def test_schedule_many_bulk_and_idempotent(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    specs = [JobSpec(args=[i], key="k%d" % i, delay=i) for i in range(50)]
    ids = schedule_many("tests.jobs.noop", specs)
    assert len(set(ids)) == 50 and Job.objects.count() == 50
    assert delayq_engine.stats("default").scheduled + delayq_engine.stats("default").ready == 50
    assert schedule_many("tests.jobs.noop", specs) == ids
    assert Job.objects.count() == 50


def test_schedule_many_sends_at_commit_in_a_transaction(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    with transaction.atomic():
        ids = schedule_many("tests.jobs.noop", [JobSpec(args=[i]) for i in range(3)])
        assert [in_redis(delayq_engine, i) for i in ids] == ["", "", ""]
    assert {in_redis(delayq_engine, i) for i in ids} <= {"pending", "ready"}
    assert all(in_redis(delayq_engine, i) for i in ids)


def test_a_spec_carries_its_own_queue_and_retries(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    own, common = schedule_many("tests.jobs.noop", [
        JobSpec(args=[1], queue="slow", max_attempts=2, backoff=[5]), JobSpec(args=[2])],
        max_attempts=7)
    rows = {row.pk: row for row in Job.objects.filter(pk__in=[own, common])}
    assert (rows[own].queue, rows[own].max_attempts) == ("slow", 2)
    assert (rows[common].queue, rows[common].max_attempts) == ("default", 7)
    assert in_redis(delayq_engine, own, queue="slow") and in_redis(delayq_engine, common)


def test_using_refuses_a_name_that_is_no_option(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import job

    with pytest.raises(TypeError, match="retries"):
        job("tests.jobs.noop").using(retries=3)


def test_schedule_hands_every_option_to_the_job_spec(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``schedule()`` names each option when it makes the job's ``JobSpec``: every one of
    ``JobOptions``' fields is a keyword of ``schedule()`` and reaches the spec as given."""
    import inspect

    from django_delayq.core import api, options

    keywords = {name for name, p in inspect.signature(schedule).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == options.NAMES
    made: list[JobSpec] = []
    monkeypatch.setattr(api, "_schedule", lambda fn, spec, **extra: made.append(spec))
    given = {name: object() for name in sorted(options.NAMES)}  # a value of each its own
    schedule("tests.jobs.noop", 1, 2, x=3, **given)
    [spec] = made
    assert spec.args == (1, 2) and spec.kwargs == {"x": 3}
    assert {name: getattr(spec, name) for name in options.NAMES} == given


def test_schedule_many_validates_every_spec(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=r"args\[0\]"):
        schedule_many("tests.jobs.noop", [JobSpec(args=[1]), JobSpec(args=[{1, 2}])])
    assert Job.objects.count() == 0


class Model:
    def __repr__(self) -> str:
        return "<Order: 5>"


BAD_CASES = [
    (("tests.jobs.nope",), {}, "cannot import 'tests.jobs.nope'"),
    (("nosuchmodule.fn",), {}, "not in DELAYQ"),
    (("tests.jobs_more.not_a_function",), {}, "not a function"),
    ((lambda: None,), {}, "lambda"),
    ((jobs_more.make_closure(),), {}, "nested function or closure"),
    ((jobs_more.Holder().method,), {}, "bound method"),
    ((42,), {}, "expected a function or a dotted path"),
    (("tests.jobs.noop", Model()), {}, r"args\[0\] = <Order: 5> \(Model\)"),
    (("tests.jobs.noop", {1, 2}), {}, r"args\[0\] = \{1, 2\} \(set\)"),
    (("tests.jobs.noop",), {"when": dt.datetime(2030, 1, 1)}, r"kwargs\['when'\]"),
    (("tests.jobs.noop", [1, decimal.Decimal("1.5")]), {}, r"args\[0\]\[1\]"),
    (("tests.jobs.noop", uuid.UUID(int=1)), {}, "UUID"),
    (("tests.jobs.noop", {1: "a"}), {}, "key 1"),
    (("tests.jobs.noop", float("nan")), {}, "not finite"),
    (("tests.jobs.noop",), {"at": dt.datetime(2030, 1, 1)}, "naive datetime"),
    (("tests.jobs.noop",), {"delay": 5, "at": timezone.now()}, "not both"),
    (("tests.jobs.noop",), {"delay": -1}, "delay must be >= 0"),
    (("tests.jobs.noop",), {"delay": "5m"}, "delay must be seconds"),
    (("tests.jobs.noop",), {"queue": "nope"}, "unknown queue 'nope'"),
    (("tests.jobs.noop",), {"max_attempts": 0}, "max_attempts must be an integer from 1 to 1000, got 0"),
    (("tests.jobs.noop",), {"max_attempts": -3}, "got -3"),
    (("tests.jobs.noop",), {"backoff": "fast"}, "backoff 'fast'"),
    (("tests.jobs.noop",), {"key": ""}, "key must be"),
    (("tests.jobs.noop", "x" * 600_000), {}, "MAX_PAYLOAD_BYTES"),
    # Values that used to raise OverflowError, RecursionError or UnicodeEncodeError deeper
    # down, or were accepted and broke the worker later: each is an InvalidJob naming it.
    (("tests.jobs.noop",), {"max_attempts": 10**20}, r"from 1 to 1000, got 10{20}"),
    (("tests.jobs.noop",), {"max_attempts": 1001}, "from 1 to 1000, got 1001"),
    (("tests.jobs.noop",), {"delay": 1e12}, r"delay must be at most \d+ seconds \(100 years\)"),
    (("tests.jobs.noop",), {"delay": 10**400}, "delay must be at most"),
    (("tests.jobs.noop",), {"delay": float("inf")}, "delay must be at most"),
    (("tests.jobs.noop",), {"delay": dt.timedelta.max}, "delay must be at most"),
    (("tests.jobs.noop",), {"delay": float("nan")},
     r"delay must be a number of seconds, got nan \(not a number\)"),
    (("tests.jobs.noop",), {"at": dt.datetime(9999, 12, 31, 23, tzinfo=dt.timezone(
        dt.timedelta(hours=-5)))}, "cannot be converted to a time"),
    (("tests.jobs.noop",), {"backoff": 1e308}, r"backoff 1e\+308 is not valid: .* \(a year\)"),
    (("tests.jobs.noop",), {"backoff": [1e308]}, r"delay \[0\] of the list .* \(a year\)"),
    (("tests.jobs.noop",), {"backoff": [5, float("inf")]}, r"delay \[1\] of the list"),
    (("tests.jobs.noop",), {"backoff": []}, "must not be empty"),
    (("tests.jobs.noop",), {"backoff": [5] * 1000}, "at most 999 delays"),
    (("tests.jobs.noop",), {"backoff": {"base": 1e308}}, "exponential 'base'"),
    (("tests.jobs.noop",), {"backoff": {"factor": 1e308}}, "exponential 'factor'"),
    (("tests.jobs.noop",), {"backoff": {"jitter": "yes"}}, "exponential 'jitter'"),
    (("tests.jobs.noop",), {"backoff": {1: 2, "base": 1}}, "unknown exponential backoff keys 1"),
    (("tests.jobs.noop",), {"backoff": float("nan")}, "backoff nan is not valid"),
    (("tests.jobs.noop", "bad \ud800 input"), {}, r"args\[0\] = 'bad \\ud800 input' \(a lone surrogate"),
    (("tests.jobs.noop",), {"note": {"k\udfff": 1}}, r"kwargs\['note'\] has the key 'k\\udfff' \(a lone"),
    (("tests.jobs.noop",), {"key": "order-\ud800"}, r"key 'order-\\ud800' contains a lone surrogate"),
    (("tests.jobs.noop",), {"key": "k" * 256}, "key must be at most 255 characters"),
    (("tests.jobs.noop\ud800",), {}, "callable path .* lone surrogate"),
    (("tests.jobs.noop", "\U0001f600" * 200_000), {}, r"payload is 8000\d\d bytes, over .* UTF-8"),
]


@pytest.mark.parametrize("args,kwargs,message", BAD_CASES)
def test_bad_input_raises_invalid_job(delayq_settings, args, kwargs, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=message):
        schedule(*args, **kwargs)
    assert Job.objects.count() == 0


def test_invalid_job_is_a_value_error() -> None:
    assert issubclass(InvalidJob, ValueError)


def test_static_method_path_is_refused(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="tests.jobs_more.Holder.static"):
        schedule(jobs_more.Holder.static, 3)
    assert Job.objects.count() == 0


def test_unset_allow_list_allows_nothing(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    from django_delayq.core import registry

    delayq_settings.DELAYQ = {k: v for k, v in delayq_settings.DELAYQ.items()
                              if k != "ALLOWED_CALLABLES"}
    assert registry.allowed_modules() == frozenset()
    assert not registry.is_allowed("tests.jobs.noop")
    assert not registry.is_allowed("django_delayq.contrib.http.post_json")
    with pytest.raises(InvalidJob, match="ALLOWED_CALLABLES'] is empty"):
        schedule("tests.jobs.noop")


def test_schedule_spec_takes_kwargs_named_like_options(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import schedule_spec

    h = schedule_spec("tests.jobs.noop", JobSpec(kwargs={"queue": "q", "delay": 5}, delay=60),
                      queue="emails")
    row = h.job
    assert (row.queue, row.kwargs) == ("emails", {"queue": "q", "delay": 5})
    Job.objects.filter(pk=h.id).update(status=JobStatus.SUCCEEDED)
    again = requeue(h.id)  # copies kwargs as values, whatever their names
    assert again.job.kwargs == {"queue": "q", "delay": 5} and again.job.queue == "emails"


def test_schedule_many_rows_hold_every_value(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    """The fast path (executemany INSERT; COPY on PostgreSQL) writes what schedule() would."""
    at = timezone.now() + dt.timedelta(hours=1)
    ids = schedule_many("tests.jobs.noop", [
        JobSpec(args=[1, "é", {"k": [None, True]}], kwargs={"x": 1.5}, at=at),
        JobSpec(delay=30)], max_attempts=4, backoff=[1, 2])
    a, b = (Job.objects.get(pk=i) for i in ids)
    assert (a.args, a.kwargs, a.key) == ([1, "é", {"k": [None, True]}], {"x": 1.5}, None)
    assert a.run_at == at and a.status == JobStatus.SCHEDULED and a.attempts == 0
    assert (a.max_attempts, a.backoff, a.last_error, a.result) == (4, [1, 2], "", None)
    assert a.created_at == a.updated_at and a.started_at is None and not a.cancel_requested
    assert abs((b.run_at - b.created_at).total_seconds() - 30) < 1 and b.kwargs == {}
    loc = delayq_engine.inspect("default", a.id)
    assert loc.place == "pending" and loc.score_ms == int(at.timestamp() * 1000)


@pytest.mark.parametrize("args, kwargs, named", [
    ((1, float("nan")), {}, "args[1] = nan (not finite)"),
    (([{"a": [1, {2: "x"}]}],), {}, "args[0][0]['a'][1] has the key 2 (int)"),
    ((dt.date(2026, 1, 1),), {}, "args[0] = datetime.date(2026, 1, 1) (date)"),
    ((), {"when": {"nested": object}}, "kwargs['when']['nested'] = <class 'object'> (type)"),
])
def test_schedule_many_names_the_bad_value(delayq_engine, args, kwargs, named) -> None:  # type: ignore[no-untyped-def]
    """The fast encoding path still names the bad value and its place, and schedules
    nothing of the call."""
    good = JobSpec(args=(1, 2))
    with pytest.raises(InvalidJob) as err:
        schedule_many("tests.jobs.add", [good, JobSpec(args=args, kwargs=kwargs)])
    assert named in str(err.value)
    assert not Job.objects.exists()


def test_schedule_many_refuses_a_circular_argument(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(InvalidJob, match=r"args\[0\]\[0\].* nested more than 100 levels"):
        schedule_many("tests.jobs.add", [JobSpec(args=(loop,))])
    with pytest.raises(InvalidJob, match="nested more than 100 levels"):
        schedule("tests.jobs.add", loop, 1)


def nested(depth: int, leaf: object = 1) -> object:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [101, 980, 5_000])
def test_deep_nesting_is_refused_by_every_way_in(delayq_settings, depth) -> None:  # type: ignore[no-untyped-def]
    """Lists only (no ``{`` in the JSON) and deeper than the C encoder can go: always an
    InvalidJob naming the place, never a RecursionError."""
    from django_delayq import schedule_spec

    deep = nested(depth)
    message = r"args\[0\]\[0\].*\[0\] is nested more than 100 levels deep"
    with pytest.raises(InvalidJob, match=message):
        schedule("tests.jobs.noop", deep)
    with pytest.raises(InvalidJob, match=message):
        schedule_spec("tests.jobs.noop", JobSpec(args=(deep,)))
    with pytest.raises(InvalidJob, match=message):
        schedule_many("tests.jobs.noop", [JobSpec(args=(1,)), JobSpec(args=(deep,))])
    with pytest.raises(InvalidJob, match="nested more than 100 levels deep"):
        schedule("tests.jobs.noop", data={"k": deep})
    assert Job.objects.count() == 0


def test_hundred_levels_are_still_accepted(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop", nested(99))
    assert h.job.args == [nested(99)]


@pytest.mark.parametrize(("spec", "message"), [
    (JobSpec(args=("bad \ud800 input",)), r"args\[0\] = 'bad \\ud800 input' \(a lone surrogate"),
    (JobSpec(kwargs={"x": ["\udc80"]}), r"kwargs\['x'\]\[0\] = '\\udc80'"),
    (JobSpec(key="\ud800"), "key '\\\\ud800' contains a lone surrogate"),
    (JobSpec(key="k" * 300), "key must be at most 255 characters"),
    (JobSpec(delay=1e12), "delay must be at most"),
    (JobSpec(delay=dt.timedelta(days=999_999_999)), "delay must be at most"),
    (JobSpec(at=dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-1)))),
     "cannot be converted to a time"),
    (JobSpec(args=("\U0001f600" * 200_000,)), r"payload is \d+ bytes, over"),
])
def test_schedule_many_refuses_what_schedule_refuses(delayq_settings, spec, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=message):
        schedule_many("tests.jobs.noop", [JobSpec(args=(1,)), spec])
    assert Job.objects.count() == 0


@pytest.mark.parametrize("options", [{"max_attempts": 10**20}, {"backoff": 1e308},
                                     {"backoff": [1e308]}, {"backoff": {"max": 1e308}}])
def test_schedule_many_refuses_bad_options(delayq_settings, options) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match="max_attempts|backoff"):
        schedule_many("tests.jobs.noop", [JobSpec(args=(1,))], **options)


def test_payload_limit_counts_utf8_bytes(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """500,000 emoji are 500,000 characters but 2 MB of UTF-8: over the 512 KiB limit."""
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "MAX_PAYLOAD_BYTES": 1000}
    ok = "\u00e9" * 480  # 960 bytes + the array around them: under 1,000
    schedule("tests.jobs.noop", ok)
    with pytest.raises(InvalidJob, match=r"payload is 1\d{3} bytes"):
        schedule("tests.jobs.noop", "\u00e9" * 520)  # 520 characters, 1,040 bytes
    with pytest.raises(InvalidJob, match=r"payload is 1\d{3} bytes"):
        schedule_many("tests.jobs.noop", [JobSpec(args=("\u00e9" * 520,))])
    assert Job.objects.count() == 1


def test_the_payload_size_is_that_of_the_compact_array() -> None:
    """The size checked is the UTF-8 length of ``[path,args,kwargs,max_attempts(,backoff)]``
    as compact JSON: the arguments' part plus ``payload_head_size``, with or without a
    backoff, for each path and count (kept per path and count without a backoff)."""
    from django_delayq.core import options, validation

    for path in ("tests.jobs.noop", "tests.jobs.été"):
        for max_attempts, backoff in ((3, None), (12, None), (3, [1, 2.5]), (1, "exponential"),
                                      (3, None)):
            args, kwargs = ["é", 1], {"k": None}
            _, _, size = validation.encode_args(args, kwargs)
            array = [path, args, kwargs, max_attempts, *([] if backoff is None else [backoff])]
            assert size + options.payload_head_size(path, max_attempts, backoff) == len(
                validation.dumps(array).encode())


@pytest.mark.parametrize(("move", "message"), [
    (lambda jid: reschedule(jid, delay=1e12), "delay must be at most"),
    (lambda jid: reschedule(jid, delay=10**400), "delay must be at most"),
    (lambda jid: reschedule(jid, delay=float("nan")), "got nan \\(not a number\\)"),
    (lambda jid: reschedule(jid, at=dt.datetime.max.replace(
        tzinfo=dt.timezone(dt.timedelta(hours=-3)))), "cannot be converted"),
    (lambda jid: requeue(jid, delay=1e12), "delay must be at most"),
    (lambda jid: requeue(jid, delay=dt.timedelta.max), "delay must be at most"),
])
def test_reschedule_and_requeue_refuse_bad_times(delayq_engine, move, message) -> None:  # type: ignore[no-untyped-def]
    h = schedule("tests.jobs.noop", delay=60)
    Job.objects.filter(pk=h.id).update(status=JobStatus.SUCCEEDED)  # requeue-able too
    with pytest.raises(InvalidJob, match=message):
        move(h.id)
    assert Job.objects.count() == 1


def test_requeue_of_a_forged_row_is_checked_like_schedule(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    """Requeue copies a finished row into a new job: a backoff or max_attempts the row was
    made to hold is refused like at schedule() time."""
    h = schedule("tests.jobs.noop")
    Job.objects.filter(pk=h.id).update(status=JobStatus.SUCCEEDED, backoff=[1e308])
    with pytest.raises(InvalidJob, match="backoff"):
        requeue(h.id)
    Job.objects.filter(pk=h.id).update(backoff=None, max_attempts=5000)
    with pytest.raises(InvalidJob, match="max_attempts must be an integer from 1 to 1000"):
        requeue(h.id)
    assert Job.objects.count() == 1


def test_requeue_marks_the_row_live_before_redis_hands_the_job_out(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    """A worker runs only jobs whose row is live: a requeued dead job must not be claimable
    while its row still says dead. When Redis no longer holds it, the row stays dead and
    a copy is scheduled."""
    h = schedule("tests.jobs.noop")
    [c] = delayq_engine.claim("default", 1, 10_000).jobs
    delayq_engine.nack("default", [(c.id, c.token, None)])
    Job.objects.filter(pk=h.id).update(status=JobStatus.DEAD, attempts=1)
    again = requeue(h.id)
    assert again.id == h.id and h.job.status == JobStatus.SCHEDULED and h.job.attempts == 0
    [claimed] = payloads.load(delayq_engine.claim("default", 10, 60_000).jobs)
    assert claimed.id == h.id
    delayq_engine.nack("default", [(claimed.id, claimed.token, None)])
    delayq_engine.purge("default")  # Redis lost it (or trimmed its dead set)
    Job.objects.filter(pk=h.id).update(status=JobStatus.DEAD, attempts=2)
    copy = requeue(h.id)
    assert copy.id != h.id
    assert (h.job.status, h.job.attempts) == (JobStatus.DEAD, 2)


def test_job_using_passes_kwargs_named_like_options_to_the_function(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    """``job(fn).using(...)`` keeps options apart: every keyword of ``.schedule()`` is an
    argument of the job function, and the job runs with them."""
    from django_delayq import job
    from django_delayq.testing import run_due_jobs

    h = job(jobs_more.named_like_options).using(queue="emails").schedule(
        delay=7, queue="slow", key="k-1", at="noon")
    row = h.job
    assert (row.queue, row.key) == ("emails", None)
    assert row.kwargs == {"delay": 7, "queue": "slow", "key": "k-1", "at": "noon"}
    assert in_redis(delayq_engine, h.id, "emails") == "pending"
    assert run_due_jobs(["emails"]) == 1
    row = h.job
    assert row.status == JobStatus.SUCCEEDED
    assert row.result == {"delay": 7, "queue": "slow", "key": "k-1", "at": "noon"}


def test_job_using_options_apply_as_in_schedule(delayq_engine) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import job

    call = job("tests.jobs.add").using(queue="slow", delay=dt.timedelta(minutes=30),
                                       max_attempts=4, key="once")
    h = call.schedule(1, 2)
    row = h.job
    assert (row.queue, row.max_attempts, row.key, row.args) == ("slow", 4, "once", [1, 2])
    assert abs((row.run_at - timezone.now()).total_seconds() - 1800) < 5
    assert in_redis(delayq_engine, h.id, "slow") == "pending"
    assert call.schedule(1, 2).id == h.id  # the key makes it idempotent, as in schedule()
    assert Job.objects.count() == 1
    when = timezone.now() + dt.timedelta(hours=2)
    later = call.using(delay=None, at=when, key=None, backoff=[5, 10]).schedule(3, 4)
    row = later.job
    assert (row.run_at, row.backoff, row.max_attempts) == (when, [5, 10], 4)
    assert (row.key, row.queue) == (None, "slow")  # using() changes only what it is given
    ids = job(jobs.noop).using(queue="emails", delay=60).schedule_many(
        [JobSpec(args=(1,)), JobSpec(args=(2,), delay=0)])
    rows = {r.args[0]: r for r in Job.objects.filter(pk__in=ids)}
    assert {r.queue for r in rows.values()} == {"emails"}
    assert rows[1].run_at - rows[2].run_at > dt.timedelta(seconds=50)


@pytest.mark.parametrize(("options", "message"), [
    ({"queue": "nope"}, "unknown queue 'nope'"),
    ({"delay": -1}, "delay must be >= 0"),
    ({"delay": "soon"}, "delay must be seconds"),
    ({"delay": 5, "at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)}, "pass delay or at, not both"),
    ({"at": "tomorrow"}, "at must be a datetime"),
    ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 1000"),
    ({"backoff": [1e308]}, "backoff"),
    ({"key": ""}, "key must be a non-empty string"),
    # an expiry not after the due time, whenever .schedule() is called
    ({"delay": 60, "expires": 30}, NEVER_RUN),
    ({"delay": dt.timedelta(minutes=1), "expires": 60}, NEVER_RUN),
    ({"at": dt.datetime(2100, 1, 1, tzinfo=dt.UTC),
      "expires": dt.datetime(2099, 12, 31, tzinfo=dt.UTC)}, NEVER_RUN),
    ({"delay": 7200, "expires": dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)}, NEVER_RUN),
])
def test_job_using_refuses_bad_options_at_once(delayq_settings, options, message) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import job

    with pytest.raises(InvalidJob, match=message):
        job("tests.jobs.noop").using(**options)
    assert Job.objects.count() == 0


def test_job_using_leaves_a_relative_expiry_after_an_absolute_at_to_schedule(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """``expires`` counts from ``.schedule()``'s now, ``at`` does not: whether the expiry
    falls after the due time depends on when it is called; ``.schedule()`` checks it."""
    from django_delayq import job

    at = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    call = job("tests.jobs.noop").using(at=at, expires=3600)
    with pytest.raises(InvalidJob, match=NEVER_RUN):
        call.schedule()
    assert job("tests.jobs.noop").using(delay=30, expires=60).delay == 30
    assert Job.objects.count() == 0


def test_job_using_refuses_a_callable_outside_the_allow_list(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import job

    call = job("os.system")  # nothing is checked before using() or schedule()
    with pytest.raises(InvalidJob, match="os.system"):
        call.using(delay=1)
    with pytest.raises(InvalidJob, match="os.system"):
        call.schedule("true")
    with pytest.raises(InvalidJob, match="names one job"):
        job("tests.jobs.noop").using(key="k").schedule_many([JobSpec()])
    assert Job.objects.count() == 0
