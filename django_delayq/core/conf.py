"""The ``DELAYQ`` setting, parsed once into a frozen ``Settings``; never read at import.

Every problem is reported by ``problems()`` (which feeds ``manage.py check``) and
raised as ``ImproperlyConfigured`` naming the key and the value by ``get_settings()``.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from django_delayq.core import limits, schedules
from django_delayq.core.validation import name_problem
from django_delayq.engine import backoff as backoff_mod
from django_delayq.engine import urls
from django_delayq.engine.shard_map import MAX_SHARDS, SHARD_MARK

# QUEUE_OPTIONS keys a sharded queue refuses: each shard's claim.lua would count its own
LIMIT_KEYS = ("rate_limit", "concurrency", "group_rate_limit", "group_concurrency")

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


def _positive(name: str, value: object, *, integer: bool = False) -> str | None:
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value <= 0:
        kind = "an integer" if integer else "a number"
        return "DELAYQ[%r] must be %s > 0, not %r" % (name, kind, value)
    return None


URL_SCHEMES = ("redis://", "rediss://", "unix://", *urls.CLUSTER_SCHEMES, *urls.SENTINEL_SCHEMES)


def _url_problem(url: object) -> str | None:
    if url is None:
        return None
    if not isinstance(url, str) or not url.startswith(URL_SCHEMES):
        return ("DELAYQ['REDIS_URL'] must start with redis://, rediss://, unix://, "
                "redis+cluster://, rediss+cluster://, redis+sentinel:// or "
                "rediss+sentinel://, not %r" % (url,))
    if urls.is_sentinel_url(url) and (why := urls.sentinel_url_problem(url)):
        return ("DELAYQ['REDIS_URL'] %r: %s (e.g. 'redis+sentinel://host1:26379,"
                "host2:26379/mymaster/0')" % (url, why))
    if urls.is_cluster_url(url) and urlsplit(url).path.strip("/") not in ("", "0"):
        return ("DELAYQ['REDIS_URL'] %r: a Redis Cluster has only database 0; drop the "
                "database number" % (url,))
    return None


def _allowed_problem(allowed: object) -> str | None:
    """ALLOWED_CALLABLES: None or a list of module names (an empty list is a check error)."""
    if allowed is None:
        return None
    if not isinstance(allowed, (list, tuple)):
        return ("DELAYQ['ALLOWED_CALLABLES'] must be a list of module names such as "
                "['shop.tasks'], not %r" % (allowed,))
    if bad := ["%r (%s)" % (entry, why) for entry in allowed if (why := name_problem(entry))]:
        return ("DELAYQ['ALLOWED_CALLABLES'] %r must list module names such as ['shop.tasks']; "
                "not module names: %s" % (allowed, ", ".join(bad)))
    return None


def _networks(value: object) -> tuple[tuple[IPNetwork, ...], str | None]:
    """HTTP_CALLBACK_ALLOWED_NETWORKS: addresses or networks ("10.1.0.0/16", "::1")."""
    if not isinstance(value, (list, tuple)):
        return (), ("DELAYQ['HTTP_CALLBACK_ALLOWED_NETWORKS'] must be a list of IP addresses or "
                    "networks such as ['10.1.0.0/16'], not %r" % (value,))
    nets, bad = [], []
    for entry in value:
        try:
            if not isinstance(entry, str):
                raise TypeError(entry)
            nets.append(ipaddress.ip_network(entry, strict=False))
        except (TypeError, ValueError):
            bad.append(entry)
    if bad:
        return (), ("DELAYQ['HTTP_CALLBACK_ALLOWED_NETWORKS'] %r: not IP addresses or networks: "
                    "%s" % (value, ", ".join(map(repr, bad))))
    return tuple(nets), None


def _report_dir_problem(value: object) -> str | None:
    """REPORT_DIR: None or an absolute path (whether it exists is the admin view's concern:
    reports may be written there after the site starts)."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not Path(value).is_absolute():
        return ("DELAYQ['REPORT_DIR'] must be None or an absolute directory path such as "
                "'/srv/delayq-reports', not %r" % (value,))
    return None


def _retention(value: object) -> tuple[tuple[tuple[str, float], ...], str | None]:
    """RETENTION: None (keep every row) or {"<final status>_days": days or None}; keys
    left out keep their default."""
    if value is None:
        return (), None
    known = DEFAULTS["RETENTION"]
    if not isinstance(value, dict) or set(value) - set(known):
        return (), ("DELAYQ['RETENTION'] must be None or a dict with keys %s (days, or None "
                    "to keep), not %r" % (", ".join(known), value))
    days = {**known, **value}
    if bad := {k: v for k, v in days.items() if v is not None and _positive(k, v)}:
        return (), ("DELAYQ['RETENTION'] %r: days must be numbers > 0 or None, not %s"
                    % (value, ", ".join("%s=%r" % kv for kv in bad.items())))
    return tuple((k.removesuffix("_days"), float(v)) for k, v in days.items()
                 if v is not None), None


def _without_shards(options: object) -> Any:
    """QUEUE_OPTIONS without the ``shards`` of each entry (``limits`` checks the rest)."""
    if not isinstance(options, dict):
        return options
    return {queue: {k: v for k, v in entry.items() if k != "shards"}
            if isinstance(entry, dict) else entry for queue, entry in options.items()}


def _shards(options: dict[str, Any]) -> dict[str, int]:
    """queue -> shard count, for the entries of (checked) QUEUE_OPTIONS giving more than one."""
    return {queue: entry["shards"] for queue, entry in options.items()
            if isinstance(entry, dict) and isinstance(entry.get("shards"), int)
            and entry["shards"] > 1}


def _shards_problems(options: object, queues: object) -> list[str]:
    """A shard count is an integer 1..MAX_SHARDS, on a queue without rate_limit or
    concurrency (a limit cannot be split exactly between shards), whose shard names
    (``queue#1`` ...) are no other queue's name."""
    if not isinstance(options, dict):
        return []
    names = set(queues) if isinstance(queues, (list, tuple)) else set()
    names |= {q for q in options if isinstance(q, str)}
    found = []
    for queue, entry in options.items():
        count = entry.get("shards", 1) if isinstance(entry, dict) else 1
        where = "DELAYQ['QUEUE_OPTIONS'][%r]['shards']" % (queue,)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SHARDS:
            found.append("%s must be an integer from 1 to %d, not %r" % (where, MAX_SHARDS, count))
        elif count > 1 and any(entry.get(k) for k in LIMIT_KEYS):
            found.append("%s is %d: a sharded queue takes no rate_limit or concurrency, nor "
                         "group limits (each shard would enforce its own; given: %s); remove "
                         "the limit or the shards" % (where, count, ", ".join(
                             "%s=%r" % (k, entry[k]) for k in LIMIT_KEYS if entry.get(k))))
        elif count > 1 and (taken := sorted(n for n in names if isinstance(n, str)
                                            and n.startswith("%s%s" % (queue, SHARD_MARK)))):
            found.append("%s is %d: the shards of %r are named %r#1... and would share keys "
                         "with queue %r; rename that queue" % (where, count, queue, queue,
                                                               taken[0]))
    return found


# The keys with a number or a flag by default take numbers > 0 (seconds, or integers) or flags.
_POSITIVE = tuple(key for key, value in DEFAULTS.items() if type(value) is float)
_POSITIVE_INTEGERS = tuple(key for key, value in DEFAULTS.items() if type(value) is int)
_FLAGS = tuple(key for key, value in DEFAULTS.items() if type(value) is bool)


def problems(user: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """Every problem of the ``DELAYQ`` setting as (key, message)."""
    user = _user_settings() if user is None else user
    merged = {**DEFAULTS, **user}
    return [
        *((name, "unknown DELAYQ key %r (known: %s)" % (name, ", ".join(DEFAULTS)))
          for name in sorted(set(user) - set(DEFAULTS))),
        *_scalar_problems(merged),
        *_queues_problems(merged),
        *_shape_problems(merged),
    ]


def _scalar_problems(merged: dict[str, Any]) -> list[tuple[str, str]]:
    """The numbers and the flags."""
    found = [(name, msg) for name in (*_POSITIVE, *_POSITIVE_INTEGERS)
             if (msg := _positive(name, merged[name], integer=name in _POSITIVE_INTEGERS))]
    for name, integer, none in (("METRICS_GROUPS", True, "no metrics per group"),
                                ("JOB_TIMEOUT_SECONDS", False, "no limit")):
        if merged[name] is not None and (msg := _positive(name, merged[name], integer=integer)):
            found.append((name, "%s (or None for %s)" % (msg, none)))
    found += [(name, "DELAYQ[%r] must be True or False, not %r" % (name, merged[name]))
              for name in _FLAGS if not isinstance(merged[name], bool)]
    return found


def _queues_problems(merged: dict[str, Any]) -> list[tuple[str, str]]:
    """QUEUES and DEFAULT_QUEUE."""
    queues = merged["QUEUES"]
    if not isinstance(queues, (list, tuple)) or not queues or not all(
        isinstance(q, str) and q and q.isprintable() and "{" not in q and "}" not in q
        for q in queues
    ):
        return [("QUEUES", "DELAYQ['QUEUES'] must be a non-empty list of queue names "
                           "without braces, not %r" % (queues,))]
    if merged["DEFAULT_QUEUE"] not in queues:
        return [("DEFAULT_QUEUE", "DELAYQ['DEFAULT_QUEUE'] %r is not in QUEUES %r"
                 % (merged["DEFAULT_QUEUE"], list(queues)))]
    return []


def _shape_problems(merged: dict[str, Any]) -> list[tuple[str, str]]:
    """The settings with a structure: backoff, lists, URL, options, schedules, prefix."""
    m, backoff, prefix = merged, merged["DEFAULT_BACKOFF"], merged["PREFIX"]
    why = backoff_mod.validate(backoff)
    prefix_ok = isinstance(prefix, str) and prefix and "{" not in prefix and "}" not in prefix
    found: list[tuple[str, list[str | None]]] = [
        ("DEFAULT_BACKOFF", [why and "DELAYQ['DEFAULT_BACKOFF'] %r: %s" % (backoff, why)]),
        ("ALLOWED_CALLABLES", [_allowed_problem(m["ALLOWED_CALLABLES"])]),
        ("REDIS_URL", [_url_problem(m["REDIS_URL"])]),
        ("HTTP_CALLBACK_ALLOWED_NETWORKS", [_networks(m["HTTP_CALLBACK_ALLOWED_NETWORKS"])[1]]),
        ("REPORT_DIR", [_report_dir_problem(m["REPORT_DIR"])]),
        ("QUEUE_OPTIONS", [*limits.queue_options_problems(_without_shards(m["QUEUE_OPTIONS"])),
                           *_shards_problems(m["QUEUE_OPTIONS"], m["QUEUES"])]),
        ("CALLABLE_LIMITS", [*limits.callable_limits_problems(m["CALLABLE_LIMITS"],
                                                               m["ALLOWED_CALLABLES"])]),
        ("RETENTION", [_retention(m["RETENTION"])[1]]),
        ("SCHEDULES", [*schedules.settings_problems(m["SCHEDULES"])]),
        ("PREFIX", [None if prefix_ok else "DELAYQ['PREFIX'] must be a non-empty string "
                                           "without braces, not %r" % (prefix,)]),
    ]
    return [(key, msg) for key, msgs in found for msg in msgs if msg]


@cache
def get_settings() -> Settings:
    user = _user_settings()
    if found := problems(user):
        raise ImproperlyConfigured("; ".join(msg for _, msg in found))
    m = {**DEFAULTS, **user}
    # checked above: the integers, flags and strings are used as they are, seconds as floats
    values: dict[str, Any] = {key.lower(): m[key] for key in DEFAULTS}
    values.update((key.lower(), float(m[key])) for key in (*_POSITIVE, "JOB_TIMEOUT_SECONDS")
                  if m[key] is not None)
    allowed = m["ALLOWED_CALLABLES"]
    values.update(
        queues=tuple(m["QUEUES"]),
        redis_url=m["REDIS_URL"] or os.environ.get("DELAYQ_REDIS_URL") or None,
        allowed_callables=None if allowed is None else tuple(allowed),
        http_callback_allowed_networks=_networks(m["HTTP_CALLBACK_ALLOWED_NETWORKS"])[0],
        report_dir=None if m["REPORT_DIR"] is None else os.fspath(m["REPORT_DIR"]),
        queue_options=limits.parse_all(_without_shards(m["QUEUE_OPTIONS"])),
        queue_shards=_shards(m["QUEUE_OPTIONS"]), retention=_retention(m["RETENTION"])[0],
        callable_limits=limits.parse_all(m["CALLABLE_LIMITS"]))
    return Settings(**values)


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: object) -> None:
    if setting in ("DELAYQ", "INSTALLED_APPS", "CACHES"):
        get_settings.cache_clear()  # connection and registry clear their own caches
