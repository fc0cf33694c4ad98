"""System checks: ``manage.py check`` reports every bad DELAYQ value before a worker starts.

``conf.problems()`` is the one validator; this module gives each DELAYQ key a stable
check id (``ERROR_IDS``, documented in docs/settings.md) and a hint saying what is
accepted. Ids never change meaning: a new key gets a new number. One check is not a
bad value but a missing one: ``ALLOWED_CALLABLES`` unset or empty allows no job at all
(``delayq.E025``), since job functions are never allowed by default. Once the setting is
valid, what needs the job modules imported is checked here as ``schedule()`` checks it
(``registry``, ``periodic.check``): CALLABLE_LIMITS paths and the jobs of SCHEDULES.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from django.core import checks

from django_delayq.core import conf, periodic, registry, schedules
from django_delayq.core.validation import MAX_ATTEMPTS
from django_delayq.exceptions import InvalidJob
from django_delayq.models import Schedule

logger = logging.getLogger(__name__)

NOT_A_DICT = "delayq.E000"
UNKNOWN_KEY = "delayq.E001"
UNMAPPED_KEY = "delayq.E099"
NO_ALLOWED_CALLABLES = "delayq.E025"  # ALLOWED_CALLABLES unset or empty: no job may run
QUEUE_OPTIONS_UNUSED = "delayq.W012"  # QUEUE_OPTIONS names a queue QUEUES does not list


_SECONDS = "a number of seconds > 0, e.g. %s"
#: Each DELAYQ key's check id (documented in docs/settings.md; an id never changes meaning:
#: a new key gets a new number) and its hint: what is accepted.
KEYS: dict[str, tuple[str, str]] = {
    "REDIS_URL": ("delayq.E002", "Use 'redis://host:6379/0', 'rediss://host:6380/0' (TLS), "
                                 "'unix:///run/redis.sock?db=0' or, for a Redis Cluster, "
                                 "'redis+cluster://host1:7000,host2:7000/', for a master behind "
                                 "Redis Sentinel 'redis+sentinel://host1:26379,host2:26379/"
                                 "mymaster/0'; or set CACHE_ALIAS instead."),
    "CACHE_ALIAS": ("delayq.E003", "Name a CACHES entry whose BACKEND is "
                                   "'django_redis.cache.RedisCache', e.g. 'default'; or set "
                                   "REDIS_URL instead."),
    "PREFIX": ("delayq.E004", "A short non-empty string without '{' or '}', e.g. 'delayq'."),
    "QUEUES": ("delayq.E005", "A non-empty list of names without braces, e.g. ['default', "
                              "'emails']."),
    "DEFAULT_QUEUE": ("delayq.E006", "One of the names in DELAYQ['QUEUES']."),
    "DEFAULT_MAX_ATTEMPTS": ("delayq.E007", "An integer from 1 to %d (what schedule() takes "
                                            "as max_attempts), e.g. 3." % MAX_ATTEMPTS),
    "DEFAULT_BACKOFF": ("delayq.E008", "A list of seconds such as [15, 180, 600], or a policy "
                                       "dict; see docs/settings.md#default_backoff."),
    "ALLOWED_CALLABLES": ("delayq.E009", "A list of module names such as ['shop.tasks', "
                                         "'django_delayq.contrib.http']: each listed module's "
                                         "top-level functions may run as jobs (not its "
                                         "submodules)."),
    "LEASE_SECONDS": ("delayq.E010", _SECONDS % "60"),
    "WAKE_INTERVAL_SECONDS": ("delayq.E011", _SECONDS % "2"),
    "RECOVER_INTERVAL_SECONDS": ("delayq.E012", _SECONDS % "1"),
    "DEAD_MAX": ("delayq.E013", "An integer >= 1: how many dead jobs Redis keeps, e.g. 100000."),
    "MAX_PAYLOAD_BYTES": ("delayq.E014", "An integer >= 1, e.g. 524288 (512 KiB); pass ids, not "
                                         "data."),
    "AUDIT_FLUSH_SECONDS": ("delayq.E015", _SECONDS % "0.05"),
    "AUDIT_BATCH": ("delayq.E016", "An integer >= 1, e.g. 500."),
    "CLAIM_BATCH": ("delayq.E017", "An integer >= 1, e.g. 100."),
    "CONCURRENCY": ("delayq.E018", "An integer >= 1: job threads per worker, e.g. 4."),
    "RECONCILE_INTERVAL_SECONDS": ("delayq.E019", _SECONDS % "30"),
    "RECONCILE_GRACE_SECONDS": ("delayq.E020", _SECONDS % "60"),
    "EAGER": ("delayq.E021", "True or False (True runs jobs inline: unit tests only)."),
    "EVENTS": ("delayq.E022", "True or False: write every transition to the capped event stream."),
    "EVENTS_MAXLEN": ("delayq.E023", "An integer >= 1: about how many events the stream keeps, "
                                     "e.g. 10000."),
    "JOB_TIMEOUT_SECONDS": ("delayq.E024", "None (no limit) or seconds > 0 after which a running "
                                           "attempt is failed and retried, e.g. 300."),
    "HTTP_CALLBACK_ALLOWED_NETWORKS": ("delayq.E026", "A list of IP addresses or networks "
                                                      "post_json may reach although not public, "
                                                      "e.g. ['10.1.0.0/16']; default []."),
    "REPORT_DIR": ("delayq.E027", "None (no report in the admin) or the absolute directory whose "
                                  "subdirectories hold delayq_report outputs, e.g. "
                                  "'/srv/delayq-reports'."),
    "QUEUE_OPTIONS": ("delayq.E028", "A dict of queue name -> options, each optional: "
                                     "{'payments': {'timeout': 30, 'rate_limit': '100/m', "
                                     "'concurrency': 5}, 'hot': {'shards': 3}}; rates 'N/s', "
                                     "'N/m', 'N/h' or 'N/10s' with N >= 1; shards 1..64, without "
                                     "a rate_limit or concurrency; see "
                                     "docs/settings.md#queue-options."),
    "CALLABLE_LIMITS": ("delayq.E029", "A dict of job path (a function of a module in "
                                       "ALLOWED_CALLABLES) -> {'rate_limit': '10/s', "
                                       "'concurrency': 2}; see docs/settings.md#callable-limits."),
    "LOG_JOBS": ("delayq.E030", "True or False: an INFO log line per job start, success and "
                                "retry."),
    "RETENTION": ("delayq.E031", "None (keep every row) or a dict such as {'succeeded_days': 7, "
                                 "'dead_days': 30}: days a finished row is kept (None: forever)."),
    "SCHEDULES": ("delayq.E032", "{'nightly': {'callable': 'shop.tasks.report', "
                                 "'cron': '0 2 * * *', 'timezone': 'Europe/Berlin'}}: see "
                                 "docs/periodic.md."),
    "METRICS_GROUPS": ("delayq.E033", "None (no metrics per group) or how many groups to export, "
                                      "e.g. 20."),
}
ERROR_IDS = {key: check_id for key, (check_id, _hint) in KEYS.items()}
HINTS = {key: hint for key, (_id, hint) in KEYS.items()}
NO_ALLOWED_HINT = (
    "List the modules that define your job functions, e.g. DELAYQ = {..., "
    "'ALLOWED_CALLABLES': ['shop.tasks']} (add 'django_delayq.contrib.http' for the built-in "
    "HTTP callback job). Only plain functions defined at the top level of a listed module can "
    "be scheduled or run; see docs/settings.md#allowed-job-functions.")
UNKNOWN_HINT = "Remove it, or fix its spelling; docs/settings.md lists every key."
DEFAULT_HINT = "See docs/settings.md for the accepted values."


def error_id(key: str) -> str:
    return ERROR_IDS.get(key, UNMAPPED_KEY if key in conf.DEFAULTS else UNKNOWN_KEY)


def hint_for(key: str) -> str:
    return HINTS.get(key, DEFAULT_HINT if key in conf.DEFAULTS else UNKNOWN_HINT)


def _no_allowed_callables(user: dict[str, Any]) -> checks.CheckMessage | None:
    """Unset or empty ALLOWED_CALLABLES: every schedule() and every job would be refused."""
    allowed = user.get("ALLOWED_CALLABLES")
    if allowed is not None and (not isinstance(allowed, (list, tuple)) or allowed):
        return None  # a valid non-empty list, or a bad value reported as delayq.E009
    state = "is not set" if allowed is None else "is empty"
    return checks.Error(
        "DELAYQ['ALLOWED_CALLABLES'] %s: no job function may be scheduled or run (there is no "
        "default; a job runs only when its module is listed)" % state,
        hint=NO_ALLOWED_HINT, obj="DELAYQ['ALLOWED_CALLABLES']", id=NO_ALLOWED_CALLABLES)


def _job_messages(key: str, checked: dict[str, Callable[[], object]]
                  ) -> list[checks.CheckMessage]:
    """``DELAYQ[key][name]``'s error for each ``checked[name]()`` that raises: ``InvalidJob``,
    or anything else (a job module failing at import, a value nobody foresaw), named with
    its type: a check reports, it never crashes the command running it."""
    found: list[checks.CheckMessage] = []
    for name, check in checked.items():
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - reported, as a check must
            if not isinstance(exc, InvalidJob):  # its traceback, for a bug of ours
                logger.debug("DELAYQ[%r][%r]: the check failed", key, name, exc_info=True)
            why = exc if isinstance(exc, InvalidJob) else "%s: %s" % (type(exc).__name__, exc)
            found.append(checks.Error("DELAYQ[%r][%r]: %s" % (key, name, why), hint=HINTS[key],
                                      obj="DELAYQ[%r]" % key, id=ERROR_IDS[key]))
    return found


def _valid_settings_messages() -> list[checks.CheckMessage]:
    """What ``schedule()`` would refuse, checked once the setting is valid (importing runs
    the job modules): CALLABLE_LIMITS paths that do not import as job functions, and
    SCHEDULES whose jobs it would refuse (``periodic.check``: the allow-list, the
    function, its arguments, the queue); and QUEUE_OPTIONS for unknown queues."""
    settings = conf.get_settings()
    found = _job_messages("CALLABLE_LIMITS", {
        path: partial(registry.check_schedulable, path) for path in settings.callable_limits})
    if settings.allowed_callables:  # else E025 says it, once
        found += _job_messages("SCHEDULES", {
            name: partial(periodic.check, Schedule(name=name, **schedules.settings_values(d)))
            for name, d in settings.schedules.items()})
    found += [checks.Warning(
        "DELAYQ['QUEUE_OPTIONS'] names queue %r, which DELAYQ['QUEUES'] %r does not list"
        % (queue, list(settings.queues)),
        hint="Fix the name; keep it only for a queue that a Tasks backend with QUEUES [] "
             "uses and a worker serves with --queues.",
        obj="DELAYQ['QUEUE_OPTIONS']", id=QUEUE_OPTIONS_UNUSED)
        for queue in sorted(set(settings.queue_options) - set(settings.queues))]
    return found


@checks.register("delayq")
def check_settings(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    try:
        user = conf._user_settings()
    except Exception as exc:  # DELAYQ is not even a dict
        return [checks.Error(str(exc), hint="DELAYQ = {'REDIS_URL': 'redis://...', ...}",
                             obj="DELAYQ", id=NOT_A_DICT)]
    found = conf.problems(user)
    messages: list[checks.CheckMessage] = [
        checks.Error(text, hint=hint_for(key), obj="DELAYQ[%r]" % key, id=error_id(key))
        for key, text in found]
    if error := _no_allowed_callables(user):
        messages.append(error)
    if not found:
        messages += _valid_settings_messages()
    return messages
