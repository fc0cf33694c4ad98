"""The ``DELAYQ`` setting, parsed once into a frozen ``Settings``; never read at import.

Every problem is reported by ``problems()`` (which feeds ``manage.py check``) and
raised as ``ImproperlyConfigured`` naming the key and the value by ``get_settings()``.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from django_delayq.core import limits, option_checks, schedules, validation
from django_delayq.core.option_checks import check_backoff, check_max_attempts
from django_delayq.core.validation import name_problem, short
from django_delayq.engine import backoff as backoff_mod
from django_delayq.engine import client as urls
from django_delayq.exceptions import InvalidJob

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
NO_LIMIT = limits.Limit()


def _key(default: object) -> Any:
    """The field of the ``DELAYQ`` key named as it is, upper-cased; ``default``: the
    key's value when the setting leaves it out (``DEFAULTS``)."""
    return field(metadata={"default": default})


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """``DELAYQ`` checked and parsed: a field per key (in the order ``DEFAULTS`` lists
    them), then what is derived from them."""

    # redis://, rediss://, unix://, redis+cluster://, redis+sentinel://; env DELAYQ_REDIS_URL
    redis_url: str | None = _key(None)
    cache_alias: str | None = _key(None)  # or reuse a django-redis cache's connection
    prefix: str = _key("delayq")
    queues: tuple[str, ...] = _key(["default"])
    default_queue: str = _key("default")
    default_max_attempts: int = _key(3)
    default_backoff: Any = _key(backoff_mod.DEFAULT_POLICY)
    # modules of job functions, e.g. ["shop.tasks"]; None/[]: none
    allowed_callables: tuple[str, ...] | None = _key(None)
    # heartbeat every 2 s: a killed worker's jobs run again in ~4-7 s
    lease_seconds: float = _key(6.0)
    # cap on any idle wait: progress never hangs on one lost wake-up
    wake_interval_seconds: float = _key(2.0)
    recover_interval_seconds: float = _key(1.0)
    dead_max: int = _key(100_000)
    max_payload_bytes: int = _key(512 * 1024)
    audit_flush_seconds: float = _key(0.05)
    audit_batch: int = _key(500)
    claim_batch: int = _key(100)
    concurrency: int = _key(4)
    reconcile_interval_seconds: float = _key(30.0)
    reconcile_grace_seconds: float = _key(60.0)
    eager: bool = _key(False)  # run jobs inline at schedule() time (unit tests)
    events: bool = _key(True)  # write every transition to the capped stream "{PREFIX}:events"
    events_maxlen: int = _key(10_000)
    # a running attempt longer than this is failed and retried
    job_timeout_seconds: float | None = _key(None)
    # queue -> {"timeout": s, "rate_limit": "100/m", "concurrency": 5,
    #           "group_rate_limit": "10/m", "group_concurrency": 2}
    # ... or {"shards": 3}: the queue spread over 3 hash tags (engine/shard_map.py)
    queue_options: dict[str, limits.Limit] = _key({})
    # job path -> {"rate_limit": "10/s", "concurrency": 2}
    callable_limits: dict[str, limits.Limit] = _key({})
    # non-public addresses post_json may reach anyway
    http_callback_allowed_networks: tuple[IPNetwork, ...] = _key([])
    report_dir: str | None = _key(None)  # absolute directory of delayq_report outputs (admin)
    log_jobs: bool = _key(True)  # an INFO line per job start, success and retry (worker/joblog.py)
    # N: gauges of the N groups with the most due jobs (None: none; label cardinality)
    metrics_groups: int | None = _key(None)
    # name -> periodic job, synced at worker start (docs/periodic.md)
    schedules: dict[str, Any] = _key({})
    # Days a finished row is kept (None: forever); workers delete older ones in batches.
    # Parsed: (final status, days kept); a status left out is kept forever.
    retention: tuple[tuple[str, float], ...] = _key({
        "succeeded_days": 7, "cancelled_days": 7, "expired_days": 30, "dead_days": 30})
    queue_shards: dict[str, int] = field(default_factory=dict)  # queue -> shards (> 1 only)

    @property
    def lease_ms(self) -> int:
        return int(self.lease_seconds * 1000)

    def timeout_for(self, queue: str, job_timeout: float | None) -> float | None:
        """The time limit of an attempt: the job's, else its queue's, else the global one."""
        given = (job_timeout, self.queue_options.get(queue, NO_LIMIT).timeout)
        return next((s for s in given if s is not None), self.job_timeout_seconds)

    def queue_limit(self, queue: str) -> tuple[limits.Rate | None, int | None]:
        """``(rate, concurrency)`` of ``queue`` (``(None, None)``: no limit)."""
        options = self.queue_options.get(queue, NO_LIMIT)
        return options.rate, options.concurrency

    def group_limit(self, queue: str) -> tuple[limits.Rate | None, int | None]:
        """``(rate, concurrency)`` of each group of ``queue`` by default (``(None, None)``:
        none; docs/groups.md)."""
        options = self.queue_options.get(queue, NO_LIMIT)
        return options.group_rate, options.group_concurrency

    def callable_limit(self, path: str) -> tuple[limits.Rate | None, int | None] | None:
        """``(rate, concurrency)`` of the job function at ``path``, ``None`` when unlimited."""
        entry = self.callable_limits.get(path)
        return None if entry is None else (entry.rate, entry.concurrency)


DEFAULTS: dict[str, Any] = {f.name.upper(): f.metadata["default"] for f in fields(Settings)
                            if "default" in f.metadata}


def _user_settings() -> dict[str, Any]:
    value = getattr(settings, "DELAYQ", {}) or {}
    if not isinstance(value, dict):
        raise ImproperlyConfigured("DELAYQ must be a dict, not %r" % (value,))
    return value


Problems = list[str]
# A key's reader: (key, its value, the merged setting) -> (the value parsed, its problems).
# The parsed value is used only when no key has a problem.
Reader = Callable[[str, object, dict[str, Any]], tuple[Any, Problems]]


def _number(integer: bool, none: str | None = None) -> Reader:
    """A number > 0 (seconds: read as a float, at most ``limits.MAX_SECONDS``), or an
    integer (at most ``limits.MAX_COUNT``); ``none``: what None means when the key takes it."""
    most = limits.MAX_COUNT if integer else limits.MAX_SECONDS

    def read(name: str, value: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
        if value is None and none is not None:
            return None, []
        if why := limits.number_problem(value, most, integer=integer):
            why = "DELAYQ[%r] %s" % (name, why)
            return None, [why if none is None else "%s (or None for %s)" % (why, none)]
        return value if integer else float(cast("float", value)), []  # checked: a number
    return read


def _must(test: Callable[[Any], bool], text: str, parse: Callable[[Any], Any] = lambda v: v
          ) -> Reader:
    """A key whose value passes ``test`` (its value: ``parse``d), else the problem
    "DELAYQ[key] ``text``, not <the value>"."""
    def read(name: str, value: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
        if test(value):
            return parse(value), []
        return None, ["DELAYQ[%r] %s, not %r" % (name, text, value)]
    return read


def _braceless(name: object) -> bool:
    return isinstance(name, str) and bool(name) and "{" not in name and "}" not in name


URL_SCHEMES = ("redis://", "rediss://", "unix://", *urls.CLUSTER_SCHEMES, *urls.SENTINEL_SCHEMES)


URL_EXAMPLES = ((urls.SENTINEL_SCHEMES, "'redis+sentinel://host1:26379,host2:26379/mymaster/0'"),
                (urls.CLUSTER_SCHEMES, "'redis+cluster://host1:7000,host2:7000/'"),
                ("unix://", "'unix:///run/redis.sock?db=0'"), ("", "'redis://host:6379/0'"))


def _url(name: str, url: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
    """REDIS_URL, else the environment's DELAYQ_REDIS_URL; named with its password masked."""
    where = "DELAYQ['REDIS_URL']"
    if url is None and not merged.get("CACHE_ALIAS"):  # with one: the cache's client
        url = os.environ.get("DELAYQ_REDIS_URL") or None
        where += " (None: the environment's DELAYQ_REDIS_URL)"
    if url is None:
        return None, []
    if not isinstance(url, str) or not url.startswith(URL_SCHEMES):
        return None, ["%s must start with redis://, rediss://, unix://, redis+cluster://, "
                      "rediss+cluster://, redis+sentinel:// or rediss+sentinel://, not %r"
                      % (where, urls.masked(url) if isinstance(url, str) else url)]
    if why := urls.url_problem(url):
        example = next(e for scheme, e in URL_EXAMPLES if url.startswith(scheme))
        return None, ["%s %r: %s (e.g. %s)" % (where, urls.masked(url), why, example)]
    if urls.is_cluster_url(url) and urlsplit(url).path.strip("/") not in ("", "0"):
        return None, ["%s %r: a Redis Cluster has only database 0; drop the database number"
                      % (where, urls.masked(url))]
    return url, []


def _cache_alias(name: str, alias: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
    """CACHE_ALIAS: None or the name of a django-redis cache of CACHES."""
    if alias is None:
        return None, []
    caches = getattr(settings, "CACHES", {}) or {}
    if not isinstance(alias, str) or alias not in caches:
        return None, ["DELAYQ['CACHE_ALIAS'] %r is not a key of CACHES %r" % (alias, list(caches))]
    backend = str(caches[alias].get("BACKEND", ""))
    if not backend.startswith("django_redis.") and not _django_redis_cache(backend):
        return None, ["DELAYQ['CACHE_ALIAS'] %r uses BACKEND %r; only django-redis caches "
                      "expose a Redis client" % (alias, backend)]
    return alias, []


def _django_redis_cache(backend: str) -> bool:
    """Whether ``backend`` names a subclass of django-redis's cache (a project's own)."""
    try:
        cls = import_string(backend)
    except Exception:  # noqa: BLE001 - any failure to import it: not one, reported as such
        return False
    return isinstance(cls, type) and any(
        "%s.%s" % (c.__module__, c.__qualname__) == "django_redis.cache.RedisCache"
        for c in cls.__mro__)


def _allowed(name: str, allowed: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
    """ALLOWED_CALLABLES: None or a list of module names (an empty list is a check error)."""
    if allowed is None:
        return None, []
    if not isinstance(allowed, (list, tuple)):
        return None, ["DELAYQ['ALLOWED_CALLABLES'] must be a list of module names such as "
                      "['shop.tasks'], not %r" % (allowed,)]
    if bad := ["%r (%s)" % (entry, why) for entry in allowed if (why := name_problem(entry))]:
        return None, ["DELAYQ['ALLOWED_CALLABLES'] %r must list module names such as "
                      "['shop.tasks']; not module names: %s" % (allowed, ", ".join(bad))]
    return tuple(allowed), []


def _networks(name: str, value: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
    """HTTP_CALLBACK_ALLOWED_NETWORKS: addresses or networks ("10.1.0.0/16", "::1")."""
    if not isinstance(value, (list, tuple)):
        return (), ["DELAYQ['HTTP_CALLBACK_ALLOWED_NETWORKS'] must be a list of IP addresses or "
                    "networks such as ['10.1.0.0/16'], not %r" % (value,)]
    nets = [_network(entry) for entry in value]
    if bad := [entry for entry, net in zip(value, nets, strict=True) if net is None]:
        return (), ["DELAYQ['HTTP_CALLBACK_ALLOWED_NETWORKS'] %r: not IP addresses or networks: "
                    "%s" % (value, ", ".join(map(repr, bad)))]
    return tuple(nets), []


def _network(entry: object) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(entry, strict=False) if isinstance(entry, str) else None
    except ValueError:
        return None


def _retention(name: str, value: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
    """RETENTION: None (keep every row) or {"<final status>_days": days or None}; keys
    left out keep their default."""
    if value is None:
        return (), []
    known = DEFAULTS["RETENTION"]
    if not isinstance(value, dict) or set(value) - set(known):
        return (), ["DELAYQ['RETENTION'] must be None or a dict with keys %s (days, or None "
                    "to keep), not %r" % (", ".join(known), value)]
    days = {**known, **value}
    if bad := {k: why for k, v in days.items()
               if v is not None and (why := limits.number_problem(v, limits.MAX_DAYS))}:
        return (), ["DELAYQ['RETENTION'] %s: days must be numbers > 0, at most %s, or None: %s"
                    % (short(value), limits.BOUND_NAMES[limits.MAX_DAYS],
                       "; ".join("%s %s" % kv for kv in bad.items()))]
    return tuple((k.removesuffix("_days"), float(v)) for k, v in days.items()
                 if v is not None), []


def _limits(problems: Callable[[object, object], Problems], other: str) -> Reader:
    """QUEUE_OPTIONS (``other``: QUEUES, whose names its queues' shards must not take)
    or CALLABLE_LIMITS (``other``: ALLOWED_CALLABLES, where its paths must be): checked
    and parsed by ``core/limits.py``."""
    def read(name: str, value: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
        found = problems(value, merged[other])
        return None if found else limits.parse_all(cast("dict[str, Any]", value)), found
    return read


def _queues(name: str, queues: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
    found = validation.queue_list_problems(queues)
    return None if found else tuple(cast("list[str]", queues)), found


def _default_queue(name: str, queue: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
    if validation.not_a_queue_name(queue):
        return None, ["DELAYQ['DEFAULT_QUEUE'] %s is not a queue name: %s"
                      % (short(queue), validation.QUEUE_NAME_RULE)]
    queues = merged["QUEUES"]
    if isinstance(queues, (list, tuple)) and queues and queue not in queues:
        return None, ["DELAYQ['DEFAULT_QUEUE'] %r is not in QUEUES %r" % (queue, list(queues))]
    return queue, []


def _max_attempts(name: str, value: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
    """DEFAULT_MAX_ATTEMPTS: what ``schedule()`` takes as ``max_attempts``."""
    try:
        return check_max_attempts(value), []
    except InvalidJob as exc:
        return None, ["DELAYQ['DEFAULT_MAX_ATTEMPTS']: %s" % exc]


def _backoff(name: str, value: object, merged: dict[str, Any]) -> tuple[Any, Problems]:
    """DEFAULT_BACKOFF: what ``schedule()`` takes as ``backoff``."""
    try:
        check_backoff(value)
    except InvalidJob as exc:
        return value, ["DELAYQ['DEFAULT_BACKOFF']: %s" % exc]
    return value, []


# -- DELAYQ["SCHEDULES"] ---------------------------------------------------------------

# The keys of a definition of DELAYQ["SCHEDULES"]: the ``Schedule`` field each fills, and
# its value when the definition leaves it out; the job options' keys are their names
# (``option_checks.SCHEDULES``).
SETTINGS_FIELDS: dict[str, tuple[str, Any]] = {
    "callable": ("callable_path", None), "args": ("args", []), "kwargs": ("kwargs", {}),
    **{name: (name, unset) for name, (unset, _) in option_checks.SCHEDULES.items()},
    "cron": ("cron", ""), "interval": ("interval_seconds", None),
    "timezone": ("time_zone", "UTC"), "start": ("start_at", None), "end": ("end_at", None),
    "jitter": ("jitter_seconds", 0), "missed": ("missed", "skip"), "enabled": ("enabled", True)}
# The definition's flags: ``enabled`` and the options that are one.
_FLAGS = (*(name for name, (unset, _) in option_checks.SCHEDULES.items()
            if isinstance(unset, bool)), "enabled")


def settings_values(d: dict[str, Any]) -> dict[str, Any]:
    """The ``Schedule`` fields of a definition of ``DELAYQ["SCHEDULES"]``, each given or
    its default."""
    values = {name: d.get(key, default) for key, (name, default) in SETTINGS_FIELDS.items()}
    return {**values, "args": list(values["args"]), "kwargs": dict(values["kwargs"])}


def settings_problems(value: object) -> list[str]:
    """Problems of ``DELAYQ["SCHEDULES"]``: ``{name: {"callable": ..., "cron"|"interval":
    ..., ...}}``; each message names the schedule and the bad value."""
    if not isinstance(value, dict):
        return ["DELAYQ['SCHEDULES'] must be a dict of name -> definition, not %r" % (value,)]
    found = []
    for name, d in value.items():
        where = "DELAYQ['SCHEDULES'][%r]" % (name,)
        if not isinstance(name, str) or not 0 < len(name) <= 100 or not isinstance(d, dict):
            found.append("%s: a name of 1-100 characters -> a dict, not %r" % (where, d))
            continue
        found += _definition_problems(where, d)
    return found


def _definition_problems(where: str, d: dict[str, Any]) -> list[str]:
    """The problems of one schedule's definition, each named with ``where``."""
    found = []
    if unknown := sorted(set(d) - set(SETTINGS_FIELDS)):
        found.append("%s: unknown keys %s" % (where, unknown))
    v = {key: default for key, (_, default) in SETTINGS_FIELDS.items()} | d
    if not isinstance(v["callable"], str):
        found.append("%s: 'callable' must be a dotted path, not %r" % (where, v["callable"]))
    if not isinstance(v["args"], (list, tuple)) or not isinstance(v["kwargs"], dict):
        found.append("%s: 'args' must be a list and 'kwargs' a dict, not %r, %r"
                     % (where, v["args"], v["kwargs"]))
    found += ["%s: %r must be True or False, not %r" % (where, flag, v[flag])
              for flag in _FLAGS if not isinstance(v[flag], bool)]
    jitter, most = v["jitter"], schedules.MAX_JITTER
    if isinstance(jitter, bool) or not isinstance(jitter, int) or not 0 <= jitter <= most:
        found.append("%s: 'jitter' must be a whole number of seconds from 0 to %d, not %r"
                     % (where, most, jitter))
    for name, (unset, check) in option_checks.SCHEDULES.items():  # as schedule() checks it
        value = v[name]  # the value that leaves it unset (an empty group: none) is no option
        if check is not None and not (type(value) is type(unset) and value == unset):
            try:
                check(value)
            except InvalidJob as exc:
                found.append("%s: %s" % (where, exc))
    for bound in ("start", "end"):  # compared with aware moments
        moment = v[bound]
        if moment is not None and (not isinstance(moment, datetime) or moment.tzinfo is None):
            found.append("%s: %r must be an aware datetime or None, not %r"
                         % (where, bound, moment))
    if v["missed"] not in ("skip", "once"):
        found.append("%s: 'missed' must be 'skip' or 'once', not %r" % (where, v["missed"]))
    try:
        schedules.check_rule(v["cron"], v["interval"], v["timezone"])
    except InvalidJob as exc:
        found.append("%s: %s" % (where, exc))
    return found


# Every key's reader. The keys with a number or a flag by default take numbers > 0 (seconds
# up to a year, or integers up to 2**31 - 1; never NaN, an infinity or a bool) or flags.
READERS: dict[str, Reader] = {
    **{key: _number(type(value) is int) for key, value in DEFAULTS.items()
       if type(value) in (int, float)},
    **{key: _must(lambda v: isinstance(v, bool), "must be True or False")
       for key, value in DEFAULTS.items() if type(value) is bool},
    "METRICS_GROUPS": _number(True, "no metrics per group"),
    "JOB_TIMEOUT_SECONDS": _number(False, "no limit"),
    "REDIS_URL": _url, "CACHE_ALIAS": _cache_alias,
    "PREFIX": _must(_braceless, "must be a non-empty string without braces"),
    "QUEUES": _queues,
    "DEFAULT_QUEUE": _default_queue, "DEFAULT_MAX_ATTEMPTS": _max_attempts,
    "DEFAULT_BACKOFF": _backoff, "ALLOWED_CALLABLES": _allowed,
    "QUEUE_OPTIONS": _limits(limits.queue_options_problems, "QUEUES"),
    "CALLABLE_LIMITS": _limits(limits.callable_limits_problems, "ALLOWED_CALLABLES"),
    "HTTP_CALLBACK_ALLOWED_NETWORKS": _networks,
    # whether it exists is the admin view's concern: reports may be written there later
    "REPORT_DIR": _must(lambda v: v is None or isinstance(v, (str, os.PathLike))
                        and Path(v).is_absolute(), "must be None or an absolute directory path "
                        "such as '/srv/delayq-reports'", lambda v: v and os.fspath(v)),
    "SCHEDULES": lambda name, value, merged: (value, settings_problems(value)),
    "RETENTION": _retention,
}


def _read(user: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The settings' fields, parsed, and every problem as (key, message)."""
    merged = {**DEFAULTS, **user}
    found = [(name, "unknown DELAYQ key %r (known: %s)" % (name, ", ".join(DEFAULTS)))
             for name in sorted(set(user) - set(DEFAULTS))]
    values = {}
    for key in DEFAULTS:
        values[key.lower()], why = READERS[key](key, merged[key], merged)
        found += [(key, msg) for msg in why]
    return values, found


def problems(user: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """Every problem of the ``DELAYQ`` setting as (key, message)."""
    return _read(_user_settings() if user is None else user)[1]


@cache
def get_settings() -> Settings:
    values, found = _read(_user_settings())
    if found:
        raise ImproperlyConfigured("; ".join(msg for _, msg in found))
    shards = {q: o.shards for q, o in values["queue_options"].items() if o.shards > 1}
    return Settings(**values, queue_shards=shards)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: object) -> None:
    if setting in ("DELAYQ", "INSTALLED_APPS", "CACHES"):
        get_settings.cache_clear()  # connection and registry clear their own caches
