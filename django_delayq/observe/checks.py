"""System checks: ``manage.py check`` reports every bad DELAYQ value before a worker starts.

``conf.problems()`` is the one validator; this module gives each DELAYQ key a stable
check id (``ERROR_IDS``, documented in docs/settings.md) and a hint saying what is
accepted. Ids never change meaning: a new key gets a new number. One check is not a
bad value but a missing one: ``ALLOWED_CALLABLES`` unset or empty allows no job at all
(``delayq.E025``), since job functions are never allowed by default. Once the setting is
valid, what needs the job modules imported is checked here as ``schedule()`` checks it
(``registry``, ``periodic.check``): CALLABLE_LIMITS paths and the jobs of SCHEDULES.

And the checks on the Redis server itself: can it evict or forget queue keys?

* ``delayq.W010`` ``maxmemory-policy`` is ``allkeys-*``: when memory is full Redis
  evicts *any* key, including a queue's ``jobs`` hash or ``pending`` set, and jobs
  silently vanish from Redis (the reconciler re-enqueues them from the audit rows, but
  only after the grace period, and a half-evicted queue can strand jobs).
  ``noeviction`` is safe (a full Redis refuses writes: ``schedule()`` keeps the row in
  the outbox). ``volatile-*`` is safe too: it only evicts keys that have a TTL and
  django-delayq never sets one on its keys.
* ``delayq.W011`` Redis could not be reached (never an error: ``manage.py check`` must
  work on a build machine without Redis).
* ``delayq.E034`` Redis answers, but not in the mode the URL names: a Redis Cluster node
  behind ``redis://`` (its keys answer MOVED), a Sentinel behind ``redis://``, or a server
  without cluster mode behind ``redis+cluster://``. An error: ``delayq_worker`` exits 2
  instead of starting.
* ``delayq.W013`` a cluster node has ``cluster-require-full-coverage yes``: once a master
  is judged failed, every node refuses every command (docs/cluster.md). Said only when
  ``CONFIG GET`` answers.
* ``delayq.W014`` a master reached through Sentinel has ``min-replicas-to-write 0``: an old
  master that stays up during a failover keeps taking writes the new one never sees
  (jobs run twice; docs/deployment.md). Said only when ``CONFIG GET`` answers.
* ``delayq.I010`` no persistence at all (no AOF, no RDB save points): a restart loses
  every job in Redis; the reconciler puts them back from the audit rows. Reported by
  ``manage.py check --deploy`` only (``DEPLOY_ONLY``).

On a Redis Cluster every primary is inspected (each holds some queues) and the
messages name the node.

And one on the database: ``delayq.W020``, a database alias delayq writes to is SQLite in
its default (``DEFERRED``) transaction mode (``check_sqlite_transactions``).

The Redis checks are skipped with ``DELAYQ["EAGER"]`` (no Redis involved) or invalid
settings (the checks above report those).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from redis.exceptions import RedisError

from django_delayq.core import conf, periodic, registry
from django_delayq.core.option_checks import MAX_ATTEMPTS
from django_delayq.engine.client import make_client
from django_delayq.engine.server_mode import WrongRedisMode, check_server_mode
from django_delayq.engine.sharded import ShardedEngine as Engine
from django_delayq.exceptions import InvalidJob
from django_delayq.models import Schedule

if TYPE_CHECKING:
    from django_delayq.engine.server import ServerInfo

logger = logging.getLogger(__name__)

NOT_A_DICT = "delayq.E000"
UNKNOWN_KEY = "delayq.E001"
UNMAPPED_KEY = "delayq.E099"
NO_ALLOWED_CALLABLES = "delayq.E025"  # ALLOWED_CALLABLES unset or empty: no job may run
QUEUE_OPTIONS_UNUSED = "delayq.W012"  # QUEUE_OPTIONS names a queue QUEUES does not list
SQLITE_DEFERRED = "delayq.W020"  # a database delayq writes to: SQLite, not IMMEDIATE
WRONG_REDIS_MODE = "delayq.E034"  # a cluster node or a Sentinel behind redis://, ...
FULL_COVERAGE = "delayq.W013"  # a cluster node with cluster-require-full-coverage yes
NO_MIN_REPLICAS = "delayq.W014"  # a master through Sentinel: min-replicas-to-write 0


_INT = "An integer from 1 to 2147483647"  # every integer key's bound
_SECONDS = "A number of seconds > 0, at most a year (31536000), e.g. %s."
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
    "QUEUES": ("delayq.E005", "A non-empty list of queue names, each once, e.g. ['default', "
                              "'emails']: no braces or commas, no leading or trailing space, "
                              "no #<digits> at the end."),
    "DEFAULT_QUEUE": ("delayq.E006", "One of the names in DELAYQ['QUEUES']."),
    "DEFAULT_MAX_ATTEMPTS": ("delayq.E007", "An integer from 1 to %d (what schedule() takes "
                                            "as max_attempts), e.g. 3." % MAX_ATTEMPTS),
    "DEFAULT_BACKOFF": ("delayq.E008", "A list of seconds such as [15, 180, 600], or a policy "
                                       "dict; see docs/settings.md#keys."),
    "ALLOWED_CALLABLES": ("delayq.E009", "A list of module names such as ['shop.tasks', "
                                         "'django_delayq.contrib.http']: each listed module's "
                                         "top-level functions may run as jobs (not its "
                                         "submodules)."),
    "LEASE_SECONDS": ("delayq.E010", _SECONDS % "6"),
    "WAKE_INTERVAL_SECONDS": ("delayq.E011", _SECONDS % "2"),
    "RECOVER_INTERVAL_SECONDS": ("delayq.E012", _SECONDS % "1"),
    "DEAD_MAX": ("delayq.E013", _INT + ": how many dead jobs Redis keeps, e.g. 100000."),
    "MAX_PAYLOAD_BYTES": ("delayq.E014", _INT + ", e.g. 524288 (512 KiB); pass ids, not "
                                         "data."),
    "AUDIT_FLUSH_SECONDS": ("delayq.E015", _SECONDS % "0.05"),
    "AUDIT_BATCH": ("delayq.E016", _INT + ", e.g. 500."),
    "CLAIM_BATCH": ("delayq.E017", _INT + ", e.g. 100."),
    "CONCURRENCY": ("delayq.E018", _INT + ": job threads per worker, e.g. 4."),
    "RECONCILE_INTERVAL_SECONDS": ("delayq.E019", _SECONDS % "30"),
    "RECONCILE_GRACE_SECONDS": ("delayq.E020", _SECONDS % "60"),
    "EAGER": ("delayq.E021", "True or False (True runs jobs inline: unit tests only)."),
    "EVENTS": ("delayq.E022", "True or False: write every transition to the capped event stream."),
    "EVENTS_MAXLEN": ("delayq.E023", _INT + ": about how many events the stream keeps, "
                                     "e.g. 10000."),
    "JOB_TIMEOUT_SECONDS": ("delayq.E024", "None (no limit) or seconds > 0, at most a year, after "
                                           "which a running attempt is failed and retried, "
                                           "e.g. 300."),
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
                                 "'dead_days': 30}: days a finished row is kept, at most "
                                 "36500 (None: forever)."),
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


def id_and_hint(key: str) -> tuple[str, str]:
    """A DELAYQ key's check id and hint; a key DELAYQ does not know gets ``UNKNOWN_KEY``."""
    fallback = (UNMAPPED_KEY, DEFAULT_HINT) if key in conf.DEFAULTS else (UNKNOWN_KEY, UNKNOWN_HINT)
    return KEYS.get(key, fallback)


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
            name: partial(periodic.check, Schedule(name=name, **conf.settings_values(d)))
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
        checks.Error(text, hint=id_and_hint(key)[1], obj="DELAYQ[%r]" % key,
                     id=id_and_hint(key)[0]) for key, text in found]
    if error := _no_allowed_callables(user):
        messages.append(error)
    if not found:
        messages += _valid_settings_messages()
    return messages


@checks.register("delayq")
def check_sqlite_transactions(app_configs: object = None,
                              **kwargs: object) -> list[checks.CheckMessage]:
    """``delayq.W020``: a database alias delayq's models are written to is SQLite in its
    default ``DEFERRED`` transaction mode. A transaction that reads, then writes
    (``schedule(..., after=...)``, ``set_group_limit``) cannot turn its read lock into
    the write lock while a worker writes: it fails at once with "database is locked",
    its ``timeout`` never applied. ``IMMEDIATE`` (Django 5.1+)
    takes the write lock at ``BEGIN``, where the timeout waits."""
    aliases = sorted({router.db_for_write(m) for m in Schedule._meta.app_config.get_models()})
    return [checks.Warning(
        "database %r is SQLite in the DEFERRED transaction mode: a delayq transaction that "
        "reads then writes (schedule(..., after=...), set_group_limit) fails at once with "
        "'database is locked' while a worker writes" % alias,
        hint="Set DATABASES[%r]['OPTIONS'] to {'transaction_mode': 'IMMEDIATE', 'timeout': "
             "20, 'init_command': 'PRAGMA journal_mode=WAL;'} (Django 5.1 or later); see "
             "docs/deployment.md." % alias, obj="DATABASES[%r]" % alias, id=SQLITE_DEFERRED)
        for alias in aliases if connections[alias].vendor == "sqlite"
        and str(connections[alias].settings_dict.get("OPTIONS", {}).get(
            "transaction_mode") or "DEFERRED").upper() not in ("IMMEDIATE", "EXCLUSIVE")]


# -- the Redis server ---------------------------------------------------------------------

WRONG_MODE_HINT = ("A Redis Cluster needs 'redis+cluster://host1:7000,host2:7000/' "
                   "('rediss+cluster://' with TLS), a single server 'redis://host:6379/0', a "
                   "master through Sentinel 'redis+sentinel://s1:26379,s2:26379/mymaster/0'; "
                   "see docs/cluster.md and docs/deployment.md.")
SAFE_POLICIES = ("noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl")
TIMEOUT_SECONDS = 1.0


def _client() -> Any:
    s = conf.get_settings()
    if s.cache_alias:
        return make_client(cache_alias=s.cache_alias)
    return make_client(s.redis_url, socket_connect_timeout=TIMEOUT_SECONDS,
                       socket_timeout=TIMEOUT_SECONDS, health_check_interval=0)


def _settings_usable() -> bool:
    """Valid settings (a bad REDIS_URL or CACHE_ALIAS is not connected through) and not
    EAGER."""
    try:
        return not conf.get_settings().eager
    except ImproperlyConfigured:  # check_settings reports bad settings
        return False


def _inspect_node(info: ServerInfo) -> list[checks.CheckMessage]:
    server = "Redis" if info.node is None else "Redis cluster node %s" % info.node
    found: list[checks.CheckMessage] = []
    memory = info.memory
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    if policy not in SAFE_POLICIES:
        found.append(checks.Warning(
            "%s maxmemory-policy is %r (maxmemory %s bytes): when memory is full Redis "
            "may evict django-delayq's queue keys and jobs vanish from Redis."
            % (server, policy, memory.get("maxmemory", "?")),
            hint="Use a Redis (or database) of its own for django-delayq with "
                 "maxmemory-policy noeviction; volatile-* policies are also safe since our "
                 "keys carry no TTL. See docs/guarantees.md.",
            id="delayq.W010"))
    save = info.save
    if not int(info.persistence.get("aof_enabled", 0)) and save is not None \
            and not save.strip():
        found.append(checks.Info(
            "%s has no persistence (appendonly no, no save points): a restart loses every "
            "job held in it; the reconciler re-enqueues them from the audit rows." % server,
            hint="Set appendonly yes (appendfsync everysec) for at most ~1 s of loss on a "
                 "crash. See docs/guarantees.md.",
            id="delayq.I010"))
    if info.full_coverage:
        found.append(checks.Warning(
            "%s has cluster-require-full-coverage yes: once a master is judged failed and no "
            "replica takes its slots over, every node refuses every command (CLUSTERDOWN), "
            "so the queues of the nodes that are up stop too." % server,
            hint="Set cluster-require-full-coverage no on every node. See docs/cluster.md.",
            id=FULL_COVERAGE))
    if info.min_replicas == "0":
        found.append(checks.Warning(
            "Redis (a master reached through Sentinel) has min-replicas-to-write 0: during a "
            "failover in which the old master stays up (SENTINEL FAILOVER, a partition) it "
            "keeps taking claims and acks the promoted replica never sees, and jobs run "
            "twice.",
            hint="Set min-replicas-to-write 1 and min-replicas-max-lag 1 on the master and "
                 "every replica (writes are refused while no replica is in sync). See "
                 "docs/deployment.md.",
            id=NO_MIN_REPLICAS))
    return found


#: Reported by ``manage.py check --deploy`` only: it is about production, and printed by
#: every command that runs the checks (``migrate``, ``runserver``) it was noise in
#: development, where a Redis without persistence is the usual case.
DEPLOY_ONLY = ("delayq.I010",)


@checks.register("delayq")
def check_redis_settings(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """Eviction and reachability: with every command that runs the checks."""
    return [m for m in check_redis() if m.id not in DEPLOY_ONLY]


@checks.register("delayq", deploy=True)
def check_redis_persistence(app_configs: object = None,
                            **kwargs: object) -> list[checks.CheckMessage]:
    """Persistence (``delayq.I010``): with ``manage.py check --deploy``."""
    return [m for m in check_redis() if m.id in DEPLOY_ONLY]


def check_redis(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """Every finding about the Redis server (``W010``, ``W011``, ``I010``, ``E034``,
    ``W013``, ``W014``)."""
    if not _settings_usable():
        return []
    client = None
    try:
        client = _client()
        check_server_mode(client)
        # the server, or each primary of a cluster
        return [message for info in Engine(client).server_info() for message in _inspect_node(info)]
    except WrongRedisMode as exc:
        key = "CACHE_ALIAS" if conf.get_settings().cache_alias else "REDIS_URL"
        return [checks.Error(str(exc), hint=WRONG_MODE_HINT, obj="DELAYQ[%r]" % key,
                             id=WRONG_REDIS_MODE)]
    except (RedisError, OSError) as exc:
        return [checks.Warning(
            "cannot reach Redis to check its eviction and persistence settings: %s" % exc,
            hint="Start Redis or set DELAYQ['REDIS_URL']; workers wait for it.",
            id="delayq.W011")]
    finally:
        if client is not None and not conf.get_settings().cache_alias:
            client.close()
