"""``manage.py check``: every bad DELAYQ value is an error with a stable id and a hint."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django_redis.cache import RedisCache

from django_delayq.core import conf, option_checks
from django_delayq.observe import checks

BAD_VALUES = {
    "REDIS_URL": "http://localhost:6379",
    "PREFIX": "a{b}",
    "QUEUES": [],
    "DEFAULT_MAX_ATTEMPTS": 0,
    "DEFAULT_BACKOFF": "sometimes",
    "ALLOWED_CALLABLES": "tests.jobs",
    "LEASE_SECONDS": -1,
    "WAKE_INTERVAL_SECONDS": 0,
    "RECOVER_INTERVAL_SECONDS": "1",
    "DEAD_MAX": 1.5,
    "MAX_PAYLOAD_BYTES": 0,
    "AUDIT_FLUSH_SECONDS": True,
    "AUDIT_BATCH": -5,
    "CLAIM_BATCH": 0,
    "CONCURRENCY": 0,
    "RECONCILE_INTERVAL_SECONDS": 0,
    "RECONCILE_GRACE_SECONDS": None,
}


def _errors(settings, **delayq):  # type: ignore[no-untyped-def]
    settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs"], **delayq}
    return checks.check_settings()


def test_valid_settings_have_no_errors(settings):
    assert _errors(settings, REDIS_URL="redis://localhost:6379/0") == []
    assert _errors(settings, REDIS_URL="rediss://h:6380/1") == []
    assert _errors(settings, REDIS_URL="unix:///run/redis.sock?db=0") == []


@pytest.mark.parametrize("key", sorted(BAD_VALUES))
def test_each_bad_value_has_its_own_stable_id_and_a_hint(settings, key):
    errors = _errors(settings, **{key: BAD_VALUES[key]})
    assert [e.id for e in errors] == [checks.ERROR_IDS[key]]
    error = errors[0]
    assert error.obj == "DELAYQ[%r]" % key
    assert repr(BAD_VALUES[key]) in error.msg or key == "QUEUES"
    assert error.hint == checks.HINTS[key]


def test_ids_are_stable_and_unique():
    # These numbers are public (docs/settings.md): a key never changes its id.
    assert checks.ERROR_IDS["REDIS_URL"] == "delayq.E002"
    assert checks.ERROR_IDS["QUEUES"] == "delayq.E005"
    assert checks.ERROR_IDS["CONCURRENCY"] == "delayq.E018"
    ids = list(checks.ERROR_IDS.values()) + [checks.NOT_A_DICT, checks.UNKNOWN_KEY,
                                             checks.UNMAPPED_KEY, checks.NO_ALLOWED_CALLABLES,
                                             checks.WRONG_REDIS_MODE]
    assert len(ids) == len(set(ids))


def test_every_setting_key_has_an_id_and_a_hint():
    missing = [key for key in conf.DEFAULTS if key not in checks.ERROR_IDS]
    assert missing == [], "give new DELAYQ keys an id in checks.ERROR_IDS and docs"
    assert set(checks.HINTS) == set(checks.ERROR_IDS)


def test_ids_are_documented():
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "settings.md").read_text()
    for key, error_id in checks.ERROR_IDS.items():
        assert "`%s`" % error_id in doc and key in doc, key
    for check_id in (checks.NO_ALLOWED_CALLABLES, checks.WRONG_REDIS_MODE, checks.FULL_COVERAGE):
        assert "`%s`" % check_id in doc, check_id


@pytest.mark.parametrize("value, state", [(None, "is not set"), ([], "is empty"),
                                          ((), "is empty")])
def test_unset_or_empty_allow_list_is_an_error_with_an_example(settings, value, state):
    delayq = {"QUEUES": ["default"]}
    if value is not None:
        delayq["ALLOWED_CALLABLES"] = value
    settings.DELAYQ = delayq
    [error] = checks.check_settings()
    assert (error.id, error.obj) == ("delayq.E025", "DELAYQ['ALLOWED_CALLABLES']")
    assert "DELAYQ['ALLOWED_CALLABLES'] %s: no job function may be scheduled or run" % state \
        in error.msg
    assert "'ALLOWED_CALLABLES': ['shop.tasks']" in error.hint
    assert "django_delayq.contrib.http" in error.hint


@pytest.mark.django_db
def test_manage_py_check_fails_without_an_allow_list(settings):
    settings.DELAYQ = {"QUEUES": ["default"]}
    with pytest.raises(SystemCheckError, match="delayq.E025"):
        call_command("check", stdout=StringIO(), stderr=StringIO())


@pytest.mark.parametrize("entry, why", [
    ("shop.tasks.*", "'*' is not an ASCII identifier"),
    ("shop.", "'' is not an ASCII identifier"),
    ("", "not a module name"),
    (3, "not a module name"),
    ("shop.__init__", "'__init__' starts with '_'"),
    ("shop._jobs", "'_jobs' starts with '_'"),
    ("shop.class", "'class' is a Python keyword"),
])
def test_allow_list_entries_must_be_module_names(settings, entry, why):
    [error] = _errors(settings, ALLOWED_CALLABLES=["tests.jobs", entry])
    assert error.id == "delayq.E009" and why in error.msg and repr(entry) in error.msg


def test_unknown_key_and_default_queue(settings):
    errors = _errors(settings, QUEUS=["x"], DEFAULT_QUEUE="other")
    assert sorted((e.id, e.obj) for e in errors) == [
        ("delayq.E001", "DELAYQ['QUEUS']"), ("delayq.E006", "DELAYQ['DEFAULT_QUEUE']")]
    assert "spelling" in [e for e in errors if e.id == "delayq.E001"][0].hint


def test_delayq_not_a_dict(settings):
    settings.DELAYQ = ["redis://localhost"]
    [error] = checks.check_settings()
    assert error.id == "delayq.E000" and "must be a dict" in error.msg


def test_several_problems_are_all_reported(settings):
    errors = _errors(settings, LEASE_SECONDS=0, CONCURRENCY=0, PREFIX="")
    assert sorted(e.id for e in errors) == ["delayq.E004", "delayq.E010", "delayq.E018"]


def test_cache_alias_must_name_a_django_redis_cache(settings):
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
        "redis": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://h:1/0"},
    }
    assert _errors(settings, CACHE_ALIAS="redis") == []
    [missing] = _errors(settings, CACHE_ALIAS="nope")
    assert missing.id == "delayq.E003" and "'nope'" in missing.msg
    [wrong] = _errors(settings, CACHE_ALIAS="default")
    assert wrong.id == "delayq.E003" and "LocMemCache" in wrong.msg


class ProjectRedisCache(RedisCache):
    """A project's own django-redis cache (a subclass): it exposes the client too."""


def test_a_cache_backend_that_fails_at_import_is_e003(settings):
    settings.CACHES = {"bad": {"BACKEND": "tests.jobs_broken.Cache"}}
    [error] = _errors(settings, CACHE_ALIAS="bad")
    assert error.id == "delayq.E003" and "tests.jobs_broken.Cache" in error.msg


def test_cache_alias_may_name_a_subclass_of_the_django_redis_cache(settings):
    settings.CACHES = {"own": {"BACKEND": "tests.observe.test_checks.ProjectRedisCache",
                               "LOCATION": "redis://h:1/0"}}
    assert _errors(settings, CACHE_ALIAS="own") == []


@pytest.mark.django_db  # Django 6 model checks query the database (JSONField support)
def test_manage_py_check_fails_before_any_worker_starts(settings):
    settings.DELAYQ = {"QUEUES": ["default"], "CONCURRENCY": 0}
    with pytest.raises(SystemCheckError) as info:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    assert "delayq.E018" in str(info.value) and "HINT" in str(info.value)


@pytest.mark.django_db
def test_the_test_settings_have_no_delayq_errors():
    from django.core.checks import run_checks

    assert [m.id for m in run_checks() if (m.id or "").startswith("delayq.E")] == []


LOCMEM_AND_REDIS = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "redis": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://h:1/0"},
}


@pytest.mark.django_db  # Django 6 model checks query the database (JSONField support)
@pytest.mark.parametrize("alias, said", [("nope", "is not a key of CACHES"),
                                         ("default", "LocMemCache")])
def test_a_bad_cache_alias_is_reported_by_check_not_a_traceback(settings, alias, said):
    """The Redis checks skip bad connection settings instead of connecting through them."""
    settings.CACHES = LOCMEM_AND_REDIS
    settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs"],
                       "CACHE_ALIAS": alias}
    with pytest.raises(SystemCheckError) as info:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    assert "delayq.E003" in str(info.value) and said in str(info.value)
    assert "delayq.W011" not in str(info.value)


@pytest.mark.parametrize("alias, said", [("nope", "is not a key of CACHES"),
                                         ("default", "LocMemCache")])
def test_get_settings_raises_for_a_bad_cache_alias(settings, alias, said):
    settings.CACHES = LOCMEM_AND_REDIS
    settings.DELAYQ = {"ALLOWED_CALLABLES": ["tests.jobs"], "CACHE_ALIAS": alias}
    with pytest.raises(ImproperlyConfigured, match=said):
        conf.get_settings()
    settings.DELAYQ = {"ALLOWED_CALLABLES": ["tests.jobs"], "CACHE_ALIAS": "redis"}
    assert conf.get_settings().cache_alias == "redis"


def test_default_max_attempts_takes_what_schedule_takes(settings):
    """Not a value every schedule() without max_attempts would refuse."""
    assert _errors(settings, DEFAULT_MAX_ATTEMPTS=option_checks.MAX_ATTEMPTS) == []
    for bad in (option_checks.MAX_ATTEMPTS + 1, 5000):
        [error] = _errors(settings, DEFAULT_MAX_ATTEMPTS=bad)
        assert error.id == "delayq.E007" and repr(bad) in error.msg
        assert "1 to %d" % option_checks.MAX_ATTEMPTS in error.msg
        assert "1 to %d" % option_checks.MAX_ATTEMPTS in error.hint
        with pytest.raises(ImproperlyConfigured, match="DEFAULT_MAX_ATTEMPTS"):
            conf.get_settings()
