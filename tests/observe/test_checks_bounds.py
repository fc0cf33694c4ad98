"""``manage.py check`` and ``get_settings()`` refuse numbers the code cannot run with
(NaN, the infinities, a bool, a value past its bound) and Redis URLs redis-py would refuse
or misread (a bad port, a database that is not a number): an error with the key's id,
naming the key and the value (a URL's password masked), never a traceback."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_delayq import schedule
from django_delayq.core import conf, limits
from django_delayq.engine.client import masked, url_problem
from django_delayq.models import Job
from django_delayq.observe import checks

NAN, INF = float("nan"), float("inf")
# every key read by conf._number: a number (seconds) or an integer by default, and the two
# that also take None
NUMBER_KEYS = sorted([k for k, v in conf.DEFAULTS.items() if type(v) in (int, float)
                      and k != "DEFAULT_MAX_ATTEMPTS"] + ["JOB_TIMEOUT_SECONDS", "METRICS_GROUPS"])
INTEGER_KEYS = {k for k, v in conf.DEFAULTS.items() if type(v) is int} | {"METRICS_GROUPS"}


def _errors(settings, **delayq):  # type: ignore[no-untyped-def]
    settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs"], **delayq}
    return checks.check_settings()


def _refused(settings, key, value):  # type: ignore[no-untyped-def]
    """The one error of ``DELAYQ[key] = value``, also raised by get_settings()."""
    [error] = _errors(settings, **{key: value})
    assert (error.id, error.obj) == (checks.ERROR_IDS[key], "DELAYQ[%r]" % key)
    with pytest.raises(ImproperlyConfigured) as raised:
        conf.get_settings()
    assert error.msg in str(raised.value)
    return error


def test_every_number_key_is_checked_here():
    assert "LEASE_SECONDS" in NUMBER_KEYS and "DEAD_MAX" in INTEGER_KEYS
    assert len(NUMBER_KEYS) == 14


@pytest.mark.parametrize("key", NUMBER_KEYS)
@pytest.mark.parametrize("value", [NAN, INF, -INF, True, 1e308, 10**40])
def test_a_number_key_refuses_nan_infinities_bools_and_huge_values(settings, key, value):
    error = _refused(settings, key, value)
    assert repr(value) in error.msg and "DELAYQ[%r]" % key in error.msg


@pytest.mark.parametrize("key", NUMBER_KEYS)
def test_a_number_key_takes_its_bound_and_names_it_past_it(settings, key):
    integer = key in INTEGER_KEYS
    most = limits.MAX_COUNT if integer else limits.MAX_SECONDS
    assert _errors(settings, **{key: most}) == []
    assert getattr(conf.get_settings(), key.lower()) == most
    error = _refused(settings, key, most + 1)
    assert "at most %d" % most in error.msg and repr(most + 1) in error.msg
    if not integer:
        assert "(a year)" in error.msg and "a year" in error.hint


@pytest.mark.parametrize("days", [NAN, INF, True, 1e9, limits.MAX_DAYS + 1, 0])
@pytest.mark.parametrize("status", ["succeeded", "dead"])
def test_retention_days_are_finite_and_at_most_100_years(settings, status, days):
    error = _refused(settings, "RETENTION", {"%s_days" % status: days})
    assert "%s_days must be a number > 0" % status in error.msg and repr(days) in error.msg
    assert "at most %d (100 years)" % limits.MAX_DAYS in error.msg


def test_retention_days_too_long_for_text_are_refused_not_a_traceback(settings):
    error = _refused(settings, "RETENTION", {"dead_days": 10**5000})
    assert "dead_days must be a number > 0" in error.msg and "16610 bits" in error.msg


def test_retention_takes_100_years(settings):
    assert _errors(settings, RETENTION={"dead_days": limits.MAX_DAYS}) == []
    assert dict(conf.get_settings().retention)["dead"] == limits.MAX_DAYS


@pytest.mark.parametrize("timeout", [NAN, INF, 1e300, True, limits.MAX_SECONDS + 1])
def test_a_queue_timeout_is_at_most_a_year(settings, timeout):
    error = _refused(settings, "QUEUE_OPTIONS", {"default": {"timeout": timeout}})
    assert "DELAYQ['QUEUE_OPTIONS']['default']['timeout'] must be a number of seconds > 0" \
        in error.msg and repr(timeout) in error.msg
    assert _errors(settings, QUEUE_OPTIONS={"default": {"timeout": limits.MAX_SECONDS}}) == []


BAD_URLS = {
    "redis://127.0.0.1:99999/0": "bad port in '127.0.0.1:99999'",
    "rediss://h:70000/0": "bad port in 'h:70000'",
    "redis+cluster://h:99999/": "bad port in 'h:99999'",
    "redis+cluster://h:7000,h2:99999/": "bad port in 'h2:99999'",
    "redis://h:abc/0": "bad port in 'h:abc'",
    "redis://h:0/0": "bad port in 'h:0'",  # redis-py would use 6379
    "redis://h:6379/\u00b2": "the database must be a number",  # redis-py: int() refuses, db 0
    "unix:///tmp/x.sock?db=x": "'db'",
    "redis://host:6379/x": "the database must be a number, not 'x'",  # redis-py: db 0
    "redis://host:6379/-1": "the database must be a number, not '-1'",
    "redis://host:6379/0?db=-1": "the database must be a number >= 0",
    "redis://host/0?socket_timeout=soon": "'socket_timeout'",
    "redis+sentinel://h1/mymaster/0?socket_timeout=soon": "'socket_timeout'",
    "redis://[::1:6379/0": "IPv6",
    # a name redis-py's connection does not take: its TypeError at the first command
    "redis://127.0.0.1:7324/0?foo=bar": "unknown query option 'foo'",
    "rediss://h/0?ssl_cert_reqs=none&Socket_Timeout=1": "unknown query option 'Socket_Timeout'",
    "unix:///tmp/x.sock?db=0&foo=1": "unknown query option 'foo'",
    "redis://h/0?protocol=7": "protocol must be either 2 or 3",
    "rediss://h/0?ssl_cert_reqs=bogus": "Invalid SSL Certificate Requirements Flag: bogus",
    "redis+cluster://h:7000/?foo=bar": "unknown query option 'foo'",
    "redis+sentinel://h1/mymaster/0?socket_timeout=1&foo=bar": "unknown query option 'foo'",
}


@pytest.mark.parametrize("url", sorted(BAD_URLS))
def test_a_bad_port_or_database_is_e002_naming_the_url(settings, url):
    error = _refused(settings, "REDIS_URL", url)
    assert repr(url) in error.msg and BAD_URLS[url] in error.msg


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "rediss://h:6380/15",
                                 "redis://[::1]:6379/0", "redis://h", "redis://h/",
                                 "unix:///run/redis.sock?db=2", "redis+cluster://a:7000,b/",
                                 "redis+sentinel://h1,h2:26380/mymaster/1?socket_timeout=1",
                                 "redis://h:6379/0 ", "redis://h:6379/ 1", "redis://h/x?db=1",
                                 "redis://:p%2Fw@h:6379/0", "redis://h/0?max_connections=5",
                                 "rediss://h/0?ssl_cert_reqs=none&socket_keepalive=true",
                                 "redis+sentinel://h1/m/0?sentinel_password=sp&password=p"])
def test_good_urls_have_no_problem(url):
    assert url_problem(url) is None


@pytest.mark.parametrize("url", ["redis://:s3cret@h:99999/0", "rediss://user:s3cret@h/x",
                                 "redis+sentinel://:s3cret@h1:port/m/0",
                                 "redis+cluster://:s3cret@h:7000/2",
                                 "redis://h:1/0?password=s3cret&socket_timeout=x",
                                 "redis+sentinel://h1/m/x?sentinel_password=s3cret",
                                 "redis://:s3cret@[::1:6379/0", "http://:s3cret@h/",
                                 "redis://:s3c/ret@h:6379/0", "redis://u:s3cret#x@h/0",
                                 "redis://:s3cret?x@h:6379/0", "redis://:s3cret@h/0?foo=bar",
                                 "redis://h/0?password=s3cret&foo=bar"])
def test_e002_masks_the_password(settings, url):
    error = _refused(settings, "REDIS_URL", url)
    assert "s3cret" not in error.msg and "***" in error.msg
    assert masked(url) in error.msg


def test_the_environments_url_is_checked_too(settings, monkeypatch):
    monkeypatch.setenv("DELAYQ_REDIS_URL", "redis://:s3cret@h:99999/0")
    error = _refused(settings, "REDIS_URL", None)
    assert "DELAYQ_REDIS_URL" in error.msg and "redis://:***@h:99999/0" in error.msg
    monkeypatch.setenv("DELAYQ_REDIS_URL", "redis://:s3cret@h:6380/1?foo=bar")
    error = _refused(settings, "REDIS_URL", None)
    assert "unknown query option 'foo'" in error.msg and "s3cret" not in error.msg
    monkeypatch.setenv("DELAYQ_REDIS_URL", "redis://h:6380/1")
    assert _errors(settings) == []
    assert conf.get_settings().redis_url == "redis://h:6380/1"


@pytest.mark.django_db  # Django 6 model checks query the database (JSONField support)
@pytest.mark.parametrize("url, named", [("redis://127.0.0.1:99999/0", "99999"),
                                        ("redis://127.0.0.1:7324/0?foo=bar", "'foo'")])
def test_manage_py_check_reports_a_bad_port_not_a_traceback(settings, url, named):
    settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs"],
                       "REDIS_URL": url}
    with pytest.raises(SystemCheckError) as info:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    assert "delayq.E002" in str(info.value) and named in str(info.value)
    assert "delayq.W011" not in str(info.value)


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["redis://127.0.0.1:99999/0", "redis://127.0.0.1:7324/0?foo=bar"])
def test_schedule_refuses_to_run_with_a_bad_port_and_writes_no_row(settings, url):
    """It took the job and only logged redis-py's ValueError (TypeError) when it sent it."""
    settings.DELAYQ = {**settings.DELAYQ, "REDIS_URL": url}
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL"):
        schedule("tests.jobs.noop")
    assert not Job.objects.exists()


def test_a_cache_alias_leaves_the_environments_url_unread(settings, monkeypatch):
    """With CACHE_ALIAS the cache's client is used: an odd DELAYQ_REDIS_URL left in the
    environment is no error."""
    settings.CACHES = {**settings.CACHES, "dq": {
        "BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://localhost:6379/0"}}
    monkeypatch.setenv("DELAYQ_REDIS_URL", "redis://h:99999/0")
    assert _errors(settings, CACHE_ALIAS="dq") == []


def test_an_integer_too_long_for_text_is_refused_not_a_traceback(settings):
    error = _refused(settings, "LEASE_SECONDS", 10**5000)
    assert "an integer of 16610 bits" in error.msg
