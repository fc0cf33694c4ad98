"""Run-time options at schedule(): priority, timeout, expires, retry_on, the arguments bound
to the function's signature; the rows that store them, the envelope read back from the row,
the reconciler and requeue keeping them; the QUEUE_OPTIONS / CALLABLE_LIMITS settings."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from django_delayq import InvalidJob, job, requeue, schedule
from django_delayq.core import limits, payloads
from django_delayq.core.api import JobSpec, schedule_many
from django_delayq.core.conf import get_settings
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job, JobAttempt, JobStatus
from django_delayq.observe import checks
from tests import jobs
from tests.helpers import ALLOWED, burst, point_at

pytestmark = pytest.mark.django_db(transaction=True)
FAR = 10**14  # a claim "now" after every due time


@pytest.fixture
def dq(settings, redis_server):  # type: ignore[no-untyped-def]
    point_at(settings, redis_server,
             ALLOWED_CALLABLES=[*ALLOWED, "tests.jobs_more", "django_delayq.contrib.http"])
    from django_delayq.core.connection import get_engine

    return get_engine()


def claim_order(engine, queue: str = "default") -> list[str]:  # type: ignore[no-untyped-def]
    return [j.id for j in engine.claim(queue, 100, 60_000, now_ms=FAR).jobs]


# -- stored on the row, sent to Redis ------------------------------------------------------

def test_options_are_stored_on_the_row_with_the_due_time_asked(dq) -> None:  # type: ignore[no-untyped-def]
    before = timezone.now()
    h = schedule(jobs.add, 1, 2, delay=60, priority=7, timeout=dt.timedelta(seconds=90),
                 expires=dt.timedelta(hours=2), retry_on=[ValueError, "json.decoder.JSONDecodeError"])
    row = Job.objects.get(pk=h.id)
    assert (row.priority, row.timeout) == (7, 90.0)
    assert row.retry_on == ["builtins.ValueError", "json.decoder.JSONDecodeError"]
    assert row.scheduled_for == row.run_at
    assert dt.timedelta(seconds=59) < row.scheduled_for - before < dt.timedelta(seconds=65)
    assert dt.timedelta(hours=2) <= row.expires_at - before < dt.timedelta(hours=2, seconds=5)
    plain = Job.objects.get(pk=schedule(jobs.noop).id)
    assert (plain.priority, plain.timeout, plain.expires_at, plain.retry_on) == (0, None, None, None)
    assert plain.scheduled_for == plain.run_at


def test_priority_reaches_redis_higher_first_then_due_order(dq) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    low = schedule(jobs.noop, at=now - dt.timedelta(seconds=3), priority=-5).id
    first_plain = schedule(jobs.noop, at=now - dt.timedelta(seconds=2)).id
    high = schedule(jobs.noop, at=now - dt.timedelta(seconds=1), priority=50).id
    later_plain = schedule(jobs.noop, at=now - dt.timedelta(milliseconds=500)).id
    assert claim_order(dq) == [high, first_plain, later_plain, low]


def test_schedule_many_takes_the_call_s_options_unless_a_spec_has_its_own(dq) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    ids = schedule_many(jobs.add, [JobSpec(args=(1, 2), at=now - dt.timedelta(seconds=2)),
                                   JobSpec(args=(3, 4), priority=90, timeout=5,
                                           retry_on=[KeyError]),
                                   JobSpec(args=(5, 6), expires=3600, delay=1)],
                        priority=-3, timeout=30, retry_on=["builtins.OSError"])
    rows = {r.pk: r for r in Job.objects.filter(pk__in=ids)}
    got = [(rows[i].priority, rows[i].timeout, rows[i].retry_on, rows[i].expires_at is None)
           for i in ids]
    assert got == [(-3, 30.0, ["builtins.OSError"], True), (90, 5.0, ["builtins.KeyError"], True),
                   (-3, 30.0, ["builtins.OSError"], False)]
    assert all(rows[i].scheduled_for == rows[i].run_at for i in ids)
    assert claim_order(dq) == [ids[1], ids[0], ids[2]]


def test_job_call_using_carries_the_options(dq) -> None:  # type: ignore[no-untyped-def]
    call = job(jobs.add).using(priority=12, timeout=3, retry_on=[ValueError])
    row = Job.objects.get(pk=call.schedule(1, b=2).id)
    assert (row.priority, row.timeout, row.retry_on, row.kwargs) == (
        12, 3.0, ["builtins.ValueError"], {"b": 2})
    with pytest.raises(InvalidJob, match="priority"):
        call.using(priority=101)
    [bulk_id] = call.schedule_many([JobSpec(args=(1, 2))])
    assert Job.objects.get(pk=bulk_id).priority == 12


def test_the_envelope_read_from_the_row_carries_the_options(dq) -> None:  # type: ignore[no-untyped-def]
    expires = timezone.now() + dt.timedelta(minutes=5)
    h = schedule(jobs.noop, priority=-20, timeout=2.5, expires=expires, retry_on=[TimeoutError])
    [claimed] = payloads.load(dq.claim("default", 10, 60_000, now_ms=FAR).jobs)
    env = claimed.payload
    assert claimed.id == h.id
    assert (env.priority, env.timeout, env.retry_on) == (-20, 2.5, ("builtins.TimeoutError",))
    assert env.expires_ms == int(expires.timestamp() * 1000)


def test_a_row_with_a_bad_option_is_broken_alone(dq) -> None:  # type: ignore[no-untyped-def]
    good, bad = schedule(jobs.noop).id, schedule(jobs.noop).id
    Job.objects.filter(pk=bad).update(retry_on=["not a path"])
    loaded = payloads.read(dq.claim("default", 10, 60_000, now_ms=FAR).jobs)
    assert [j.id for j in loaded.run] == [good]
    assert [(b.job.id, "retry_on" in b.reason) for b in loaded.broken] == [(bad, True)]


# -- bad values --------------------------------------------------------------------------

@pytest.mark.parametrize("options, named", [
    ({"priority": 101}, "priority must be an integer from -100 to 100, not 101"),
    ({"priority": -101}, "not -101"),
    ({"priority": True}, "not True"),
    ({"priority": 1.5}, "not 1.5"),
    ({"priority": "5"}, "not '5'"),
    ({"timeout": 0}, "timeout must be more than 0"),
    ({"timeout": -1}, "not -1"),
    ({"timeout": float("nan")}, "not nan"),
    ({"timeout": dt.timedelta(0)}, "timedelta"),
    ({"timeout": "30"}, "timeout must be seconds"),
    ({"timeout": 10**9}, "at most"),
    ({"expires": 0}, "is not after now"),
    ({"expires": -5}, "expires: seconds must be >= 0"),
    ({"expires": "tomorrow"}, "expires must be a datetime"),
    ({"expires": dt.datetime(2030, 1, 1)}, "naive datetime"),
    ({"expires": dt.datetime(2001, 1, 1, tzinfo=dt.UTC)}, "is not after now"),
    ({"expires": 60, "delay": 120}, "is not after the job's due time"),
    ({"retry_on": [int]}, "not an exception class"),
    ({"retry_on": ["no dots"]}, "'no dots' is not a dotted path"),
    ({"retry_on": [ValueError, 3]}, "3 is not an exception class"),
    ({"retry_on": 42}, "retry_on must be exception classes"),
    ({"retry_on": ["builtins.E%d" % i for i in range(51)]}, "at most 50"),
    ({"retry_on": ["builtins.ValueErorr"]},
     "retry_on: 'builtins.ValueErorr' names no exception class: module 'builtins' has no "
     "'ValueErorr'"),
    ({"retry_on": ["no_such_module_here.Error"]},
     "'no_such_module_here.Error' names no exception class: module 'no_such_module_here' "
     "cannot be imported (ModuleNotFoundError"),
    ({"retry_on": "json.dumps"}, "'json.dumps' names no exception class: it is a function"),
    ({"retry_on": ["json.decoder.JSONDecodeError.msg"]},
     "class 'json.decoder.JSONDecodeError' has no 'msg'"),
    ({"retry_on": ["django_delayq.nowhere.Error"]},
     "module 'django_delayq' has no 'nowhere'"),
])
def test_bad_options_are_refused_naming_the_value(dq, options, named) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=named.replace("(", r"\(").replace(")", r"\)")):
        schedule(jobs.noop, **options)
    with pytest.raises(InvalidJob):
        schedule_many(jobs.noop, [JobSpec(**options)])
    assert not Job.objects.exists()


def test_retry_on_accepts_one_class_or_path_and_drops_repeats(dq) -> None:  # type: ignore[no-untyped-def]
    assert Job.objects.get(pk=schedule(jobs.noop, retry_on=KeyError).id).retry_on == [
        "builtins.KeyError"]
    assert Job.objects.get(pk=schedule(jobs.noop, retry_on=[KeyError, "builtins.KeyError"]).id
                           ).retry_on == ["builtins.KeyError"]
    assert Job.objects.get(pk=schedule(jobs.noop, retry_on=[]).id).retry_on == []


def test_retry_on_a_path_is_stored_as_the_class_it_names(dq) -> None:  # type: ignore[no-untyped-def]
    """A path is imported at schedule() and stored as its class's own path, the one the
    worker compares: a re-exported name (``socket.error`` is ``OSError``) is retried."""
    h = schedule("tests.jobs_more.raise_permission_error", "no", max_attempts=2, backoff=[0],
                 retry_on=["socket.error", "json.JSONDecodeError"])
    assert Job.objects.get(pk=h.id).retry_on == ["builtins.OSError",
                                                 "json.decoder.JSONDecodeError"]
    with pytest.raises(InvalidJob, match="module 'socket' has no 'tiemout'"):
        job(jobs.noop).using(retry_on="socket.tiemout")  # at once
    assert burst() == 0
    row = Job.objects.get(pk=h.id)
    assert (row.status, row.attempts, row.error_type) == ("dead", 2, "builtins.PermissionError")


# -- arguments against the signature ---------------------------------------------------------

@pytest.mark.parametrize("args, kwargs, problem", [
    ((1,), {}, "missing a required argument: 'b'"),
    ((1, 2, 3), {}, "too many positional arguments"),
    ((1, 2), {"c": 3}, "got an unexpected keyword argument 'c'"),
    ((1, 2), {"a": 1}, "multiple values for argument 'a'"),
])
def test_arguments_that_do_not_bind_are_refused_naming_the_function(dq, args, kwargs,
                                                                   problem) -> None:  # type: ignore[no-untyped-def]
    where = r"the arguments do not match tests\.jobs\.add\(a, b\)"
    with pytest.raises(InvalidJob, match=where + ": " + problem):
        schedule(jobs.add, *args, **kwargs)
    with pytest.raises(InvalidJob, match=where):
        schedule_many("tests.jobs.add", [JobSpec(args=(1, 2)), JobSpec(args=args, kwargs=kwargs)])
    with pytest.raises(InvalidJob, match=where):
        job(jobs.add).schedule(*args, **kwargs)
    assert not Job.objects.exists()


def test_an_option_named_like_an_argument_of_the_function_is_refused(dq) -> None:  # type: ignore[no-untyped-def]
    post = "django_delayq.contrib.http.post_json"  # post_json(url, body, *, timeout, ...)
    with pytest.raises(InvalidJob, match="post_json takes an argument named 'timeout'.*"
                                         r"job\(fn\)\.using\(timeout=\.\.\.\)"):
        schedule(post, "https://example.com/hook", {"a": 1}, timeout=5)
    assert not Job.objects.exists()
    h = job(post).using(timeout=30).schedule("https://example.com/hook", {"a": 1}, timeout=5)
    row = Job.objects.get(pk=h.id)
    assert (row.timeout, row.kwargs) == (30.0, {"timeout": 5})
    assert schedule(post, "https://example.com/hook", priority=3).id  # no clash


def test_the_checked_options_follow_use_tz(dq, settings) -> None:  # type: ignore[no-untyped-def]
    """``USE_TZ`` on: "now" is aware and a naive ``at`` is refused; off: "now" is naive and
    a naive ``at`` is the due time (the same with "now" given by the caller)."""
    naive = dt.datetime(2031, 1, 2, 3, 4, 5)
    with pytest.raises(InvalidJob, match="naive datetime while USE_TZ=True"):
        JobSpec(at=naive).check("tests.jobs.noop")
    c = JobSpec(delay=5).check("tests.jobs.noop")
    assert c.use_tz and c.now.tzinfo is not None
    settings.USE_TZ = False
    for now in (None, dt.datetime(2030, 1, 1)):
        c = JobSpec(at=naive).check("tests.jobs.noop", now=now)
        assert not c.use_tz and c.now.tzinfo is None and c.at == naive
        assert c.now == now or now is None


def test_tasks_bind_against_the_wrapped_function_without_their_context(settings,
                                                                      redis_server) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("django_delayq.backends")
    point_at(settings, redis_server, ALLOWED_CALLABLES=["tests.jobs", "tests.jobs_tasks"])
    schedule("tests.jobs_tasks.flaky", 2)  # takes_context: (context, succeed_on)
    with pytest.raises(InvalidJob, match=r"tests\.jobs_tasks\.flaky\(succeed_on\).*too many"):
        schedule("tests.jobs_tasks.flaky", 2, 3)
    with pytest.raises(InvalidJob, match=r"tests\.jobs_tasks\.add\(a, b\)"):
        schedule("tests.jobs_tasks.add", 1)


# -- requeue and the reconciler keep them ----------------------------------------------------

def test_requeue_copies_the_options_and_records_the_lineage(dq) -> None:  # type: ignore[no-untyped-def]
    first = schedule(jobs.add, 2, 3, priority=9, timeout=4, retry_on=[ValueError],
                     expires=dt.timedelta(hours=1))
    assert burst() == 0
    assert Job.objects.get(pk=first.id).status == JobStatus.SUCCEEDED
    again = Job.objects.get(pk=requeue(first.id).id)
    assert again.pk != first.id and again.requeued_from == first.id
    assert (again.priority, again.timeout, again.retry_on, again.expires_at) == (
        9, 4.0, ["builtins.ValueError"], None)
    assert (again.args, again.scheduled_for) == ([2, 3], again.run_at)


def test_a_dead_job_requeued_under_its_id_keeps_its_priority(dq) -> None:  # type: ignore[no-untyped-def]
    dead = schedule(jobs.boom, "kaput", priority=60, max_attempts=1).id
    assert burst() == 0
    assert Job.objects.get(pk=dead).status == JobStatus.DEAD
    plain = schedule(jobs.noop, at=timezone.now() - dt.timedelta(seconds=5)).id
    assert requeue(dead).id == dead
    assert claim_order(dq) == [dead, plain]


def test_a_dead_job_requeued_under_its_id_drops_its_expiry(dq) -> None:  # type: ignore[no-untyped-def]
    """As the copy of a finished job does: its expiry passed (the row's, which a worker
    reads), the requeued job still runs; its history stays (a requeue under the same id
    numbers its attempts from 1 again)."""
    dead = schedule(jobs.boom, "kaput", max_attempts=1, expires=dt.timedelta(hours=1)).id
    assert burst() == 0
    assert Job.objects.get(pk=dead).status == JobStatus.DEAD
    Job.objects.filter(pk=dead).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert requeue(dead).id == dead
    assert (Job.objects.get(pk=dead).expires_at, Job.objects.get(pk=dead).status) == (
        None, JobStatus.SCHEDULED)
    assert burst() == 0
    row = Job.objects.get(pk=dead)
    assert (row.status, row.attempts, row.error_type) == (JobStatus.DEAD, 1, "builtins.RuntimeError")
    assert list(JobAttempt.objects.filter(job_id=dead).order_by("pk").values_list(
        "number", "outcome")) == [(1, "dead"), (1, "dead")]  # the first run's kept


def test_a_dead_job_whose_requeue_redis_refuses_keeps_its_expiry(dq) -> None:  # type: ignore[no-untyped-def]
    """Redis no longer holds it: the row goes back as it was, expiry included, and the
    job is copied (without the expiry) to a new one."""
    dead = schedule(jobs.boom, "kaput", max_attempts=1, expires=dt.timedelta(hours=1)).id
    assert burst() == 0
    expires = Job.objects.get(pk=dead).expires_at
    dq.purge("default")  # Redis lost its dead set
    copy = requeue(dead).id
    assert copy != dead
    row = Job.objects.get(pk=dead)
    assert (row.status, row.attempts, row.expires_at) == (JobStatus.DEAD, 1, expires)
    assert Job.objects.get(pk=copy).expires_at is None


def test_the_reconciler_re_enqueues_with_the_row_s_priority(dq) -> None:  # type: ignore[no-untyped-def]
    now = timezone.now()
    low = schedule(jobs.noop, at=now - dt.timedelta(seconds=2)).id
    high = schedule(jobs.noop, at=now - dt.timedelta(seconds=1), priority=80).id
    dq.purge("default")  # Redis lost the queue; the rows are the record
    assert Reconciler(dq, get_settings(), ("default",)).run_all(grace_seconds=0.0,
                                                                assume_lost=True) == 2
    assert claim_order(dq) == [high, low]


# -- settings -----------------------------------------------------------------------------

@pytest.mark.parametrize("text, rate", [
    ("10/s", (10, 1000)), ("100/m", (100, 60_000)), ("5/h", (5, 3_600_000)),
    ("5/10s", (5, 10_000)), (" 3 / 15m ", (3, 900_000)),
    ("0/s", None), ("10/d", None), ("ten/s", None), ("10/0s", None), ("10", None),
    (10, None), ("10/200h", None),
])
def test_rates_are_parsed(text, rate) -> None:  # type: ignore[no-untyped-def]
    assert limits.parse_rate(text) == rate


def test_queue_options_and_callable_limits_become_settings(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "JOB_TIMEOUT_SECONDS": 600,
                       "QUEUE_OPTIONS": {"emails": {"timeout": 30, "rate_limit": "100/m",
                                                    "concurrency": 5},
                                         "slow": {"concurrency": 1}},
                       "CALLABLE_LIMITS": {"tests.jobs.add": {"rate_limit": "10/s"}}}
    s = get_settings()
    assert s.timeout_for("emails", None) == 30.0
    assert s.timeout_for("emails", 2.0) == 2.0
    assert s.timeout_for("slow", None) == 600.0
    assert s.timeout_for("default", None) == 600.0
    assert s.queue_limit("emails") == ((100, 60_000), 5)
    assert s.queue_limit("slow") == (None, 1)
    assert s.queue_limit("default") == (None, None)
    assert s.callable_limit("tests.jobs.add") == ((10, 1000), None)
    assert s.callable_limit("tests.jobs.noop") is None
    assert checks.check_settings() == []


@pytest.mark.parametrize("key, value, named", [
    ("QUEUE_OPTIONS", {"emails": {"rate_limit": "0/s"}},
     "DELAYQ['QUEUE_OPTIONS']['emails']['rate_limit'] must be a rate such as '10/s'"),
    ("QUEUE_OPTIONS", {"emails": {"concurrency": 0}}, "['concurrency'] must be an integer >= 1, "
                                                      "not 0"),
    ("QUEUE_OPTIONS", {"emails": {"concurrency": True}}, "not True"),
    ("QUEUE_OPTIONS", {"emails": {"timeout": -1}}, "['timeout'] must be a number of seconds > 0"),
    ("QUEUE_OPTIONS", {"emails": {"rate": "1/s"}}, "has an unknown key 'rate'"),
    ("QUEUE_OPTIONS", {"emails": 5}, "['emails'] must be a dict"),
    ("QUEUE_OPTIONS", ["emails"], "DELAYQ['QUEUE_OPTIONS'] must be a dict"),
    ("QUEUE_OPTIONS", {"{x}": {}}, "without braces"),
    ("CALLABLE_LIMITS", {"tests.jobs.add": {"timeout": 3}}, "has an unknown key 'timeout'"),
    ("CALLABLE_LIMITS", {"other.mod.fn": {"concurrency": 1}},
     "module 'other.mod' is not in DELAYQ['ALLOWED_CALLABLES']"),
    ("CALLABLE_LIMITS", {"tests.jobs.add": {}}, "is empty"),
    ("CALLABLE_LIMITS", {"nodots": {"concurrency": 1}}, "not a job path"),
    ("CALLABLE_LIMITS", {"tests.jobs.add": {"rate_limit": "fast"}}, "not 'fast'"),
])
def test_bad_limits_are_errors_naming_key_and_value(settings, key, value, named) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, key: value}
    with pytest.raises(ImproperlyConfigured) as raised:
        get_settings()
    assert named in str(raised.value)
    [error] = checks.check_settings()
    assert (error.id, error.obj) == (checks.ERROR_IDS[key], "DELAYQ[%r]" % key)
    assert named in error.msg


def test_checks_import_limited_callables_and_warn_about_unknown_queues(settings) -> None:  # type: ignore[no-untyped-def]
    settings.DELAYQ = {**settings.DELAYQ, "QUEUE_OPTIONS": {"nosuch": {"concurrency": 1}},
                       "CALLABLE_LIMITS": {"tests.jobs.missing": {"concurrency": 1}}}
    found = {(m.id, m.level) for m in checks.check_settings()}
    assert found == {("delayq.E029", checks.checks.ERROR),
                     (checks.QUEUE_OPTIONS_UNUSED, checks.checks.WARNING)}
    [error] = [m for m in checks.check_settings() if m.id == "delayq.E029"]
    assert "tests.jobs.missing" in error.msg and "cannot import" in error.msg


def test_run_due_jobs_ends_a_job_past_its_expiry_expired(dq) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import testing

    try:
        with testing.use_test_clock():
            late = schedule(jobs.add, 1, 2, delay=10, expires=20).id
            in_time = schedule(jobs.add, 3, 4, delay=10, expires=3600).id
            assert testing.advance(30) == 2
    finally:
        testing.reset_clock()
    late_row, in_time_row = Job.objects.get(pk=late), Job.objects.get(pk=in_time)
    assert (late_row.status, late_row.result) == (JobStatus.EXPIRED, None)
    assert "expired" in late_row.last_error
    assert (in_time_row.status, in_time_row.result) == (JobStatus.SUCCEEDED, 7)


def test_retry_on_a_class_nested_in_a_class_by_its_path(dq) -> None:  # type: ignore[no-untyped-def]
    """``app.models.Order.DoesNotExist``: the module, then classes in it; a row holding
    paths is requeued with them as stored, not imported again."""
    h = schedule(jobs.noop, retry_on="django_delayq.models.Job.DoesNotExist")
    assert Job.objects.get(pk=h.id).retry_on == ["django_delayq.models.Job.DoesNotExist"]
    with pytest.raises(InvalidJob, match="class 'django_delayq.models.Job' has no 'Missing'"):
        schedule(jobs.noop, retry_on="django_delayq.models.Job.Missing")
    with pytest.raises(InvalidJob, match="'django_delayq.models.Job.objects' is a Manager, "
                       "not a class$"):
        schedule(jobs.noop, retry_on="django_delayq.models.Job.objects.model")
    with pytest.raises(InvalidJob, match="'tests.jobs.os' is a module, not a class: give a "
                       "class by the path of the module it is defined in"):
        schedule(jobs.noop, retry_on="tests.jobs.os.error")
    Job.objects.filter(pk=h.id).update(status=JobStatus.SUCCEEDED,
                                       retry_on=["gone_module.Error", "builtins.OSError"])
    again = Job.objects.get(pk=requeue(h.id).id)
    assert again.retry_on == ["gone_module.Error", "builtins.OSError"]
