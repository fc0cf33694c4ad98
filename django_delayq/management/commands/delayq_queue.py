"""``manage.py delayq_queue pause|resume|purge|limit|unlimit|list [QUEUE ...]``: operate
whole queues, or one group of them.

* ``pause QUEUE ...``: workers claim nothing from them; ``schedule()`` still accepts jobs,
  due times are kept; running jobs finish.
* ``resume QUEUE ...``: claim again at once.
* ``pause|resume|purge QUEUE ... --group G``: the same for group G of each queue only
  (docs/groups.md; purge needs ``--yes``); ``list`` names each queue's paused groups.
* ``limit QUEUE ... --group G [--concurrency N] [--rate R]``: group G's own limits (the
  queue's group defaults for what is not given; docs/groups.md, "Limits");
  ``unlimit QUEUE ... --group G`` gives it back the defaults; ``list`` names the
  overrides.
* ``purge QUEUE ... --yes``: remove every waiting job (not the running ones, nor the
  pending jobs of periodic schedules' next ticks) and mark their rows cancelled ("purged
  from queue <q>"); says how many jobs it removed and how many schedule ticks it kept.
  Without ``--yes`` nothing is removed.
* ``list [QUEUE ...]``: each queue's state (paused or active), its jobs in Redis and its
  limits (``DELAYQ["QUEUE_OPTIONS"]``: rate, concurrency, time limit). On a Redis Cluster
  with a node down, the queues that answer are listed as usual; one whose node does not
  answer is the line ``plain  unavailable: <its node's error>`` (escaped, as
  ``delayq_status`` shows it); a sharded queue whose shard's node does not answer has its
  state and counts from the shards that answer, its state saying which did not
  (``paused (hot#2 unreachable)``); then the command ends with exit status 1, ``Redis is
  unavailable for plain, hot#2: the list above leaves it out``.

Exit codes, as the other commands: 0 done; 1 Redis unavailable (for ``list``: any queue
or shard it could not read; the others are listed first); 2 a usage error (an unknown
queue, ``purge`` without ``--yes``, no queue given, a bad limit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import RedisError

from django_delayq.core import queues
from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.limits import rate_text
from django_delayq.core.queue_controls import CONTROLS, Control, control
from django_delayq.exceptions import InvalidJob
from django_delayq.management.command_options import usage_error
from django_delayq.management.commands.delayq_status import printable
from django_delayq.observe import redis_state
from django_delayq.observe.redis_state import group_limit_text, queue_group_limits

if TYPE_CHECKING:
    from django_delayq.core.group_limits import GroupOverride
    from django_delayq.engine import Engine

ACTIONS = (*CONTROLS, "list")


class Command(BaseCommand):
    help = ("Pause, resume, purge or list queues: pause stops claiming (jobs are still "
            "accepted), purge removes waiting jobs (needs --yes), list shows state and limits; "
            "limit and unlimit set or lift one group's limits (--group).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument("queues", nargs="*", metavar="QUEUE",
                            help="Queue names (list: default all).")
        parser.add_argument("--yes", action="store_true",
                            help="purge: confirm that the waiting jobs are to be removed.")
        parser.add_argument("--group",
                            help="pause, resume, purge: this group of each queue only; "
                                 "limit, unlimit: the group whose limits change.")
        parser.add_argument("--concurrency", type=int,
                            help="limit: the group's jobs in flight at once (an integer >= 1).")
        parser.add_argument("--rate",
                            help="limit: the group's claims per window ('10/s', '100/m', "
                                 "'5/10s').")

    def handle(self, *args: Any, **options: Any) -> None:
        settings = get_settings()
        action, group = options["action"], options["group"]
        names = self._queues(action, options["queues"], settings)
        if group is not None and action == "list":
            raise usage_error("--group goes with pause, resume and purge")
        if group is None and action in ("limit", "unlimit"):
            raise usage_error("%s needs --group: the group whose limits change" % action)
        if action != "limit" and (options["concurrency"], options["rate"]) != (None, None):
            raise usage_error("--concurrency and --rate go with limit")
        if action == "purge" and not options["yes"]:
            what = ", ".join(names)
            what = what if group is None else "group %r of %s" % (group, what)
            raise usage_error("purge removes every waiting job of %s and cancels their rows; "
                              "run it again with --yes to confirm" % what)
        try:
            if action == "list":
                self._list(names, settings)
            else:
                self._control(action, names, options)
        except InvalidJob as exc:
            raise usage_error(str(exc)) from exc
        except RedisError as exc:  # exit 1, CommandError's own code
            raise CommandError("Redis is unavailable: %s" % exc) from exc

    def _queues(self, action: str, given: list[str], settings: Settings) -> list[str]:
        known = queues.known_queues(settings)
        if not given:
            if action != "list":
                raise usage_error("%s needs at least one queue (known: %s)"
                                  % (action, ", ".join(known)))
            return list(known)
        unknown = [q for q in given if q not in known]
        if unknown:
            raise usage_error("unknown queue(s) %s; the queues are %s (DELAYQ['QUEUES'] and "
                              "DELAYQ['QUEUE_OPTIONS'])" % (", ".join(unknown), ", ".join(known)))
        return list(dict.fromkeys(given))

    def _control(self, action: str, names: list[str], options: dict[str, Any]) -> None:
        """Pause, resume or purge each queue of ``names``, or only its ``--group``; limit
        or unlimit that group."""
        group = options["group"]
        for queue in names:
            done = control(action, queue, group, concurrency=options["concurrency"],
                           rate_limit=options["rate"])
            where = "%s:" % queue if group is None else "%s: group %s" % (queue, group)
            self.stdout.write("%s %s" % (where, _said(action, group, done)))

    def _list(self, names: list[str], settings: Settings) -> None:
        engine = get_engine()
        header = ("queue", "state", "due now", "scheduled", "in flight", "dead", "rate",
                  "concurrency", "timeout")
        lines, down, missing = [header], {}, []
        for q in redis_state.queues(engine, names, partial=True):
            if q.unavailable:  # its node is down (a Redis Cluster): no figure
                down[q.queue] = q.unavailable
                continue
            rate, concurrency = settings.queue_limit(q.queue)  # as set, not as the workers wrote
            timeout = settings.timeout_for(q.queue, None)
            unreachable = _unreachable(engine, q)  # shards left out of the figures
            missing += unreachable
            lines.append((q.queue, q.pause_text + _left_out(unreachable), str(q.ready),
                          str(q.scheduled), str(q.inflight), str(q.dead), rate_text(rate),
                          "-" if concurrency is None else str(concurrency),
                          "-" if timeout is None else "%gs" % timeout))
        widths = [max(map(len, column)) for column in zip(*lines, strict=True)]
        read = iter(lines)
        for queue in (None, *names):  # the header, then each queue in settings order
            if queue is not None and queue in down:  # the node's error, escaped
                self.stdout.write("%s  unavailable: %s" % (queue.ljust(widths[0]),
                                                          printable(down[queue])))
            else:
                self.stdout.write("  ".join(map(str.ljust, next(read), widths)).rstrip())
        self._group_lines(engine, [q for q in names if q not in down], settings)
        if down or missing:  # exit 1: what is listed leaves them out
            raise CommandError("Redis is unavailable for %s: the list above leaves it out" % (
                ", ".join([*down, *missing])))

    def _group_lines(self, engine: Engine, names: list[str], settings: Settings) -> None:
        limits = queue_group_limits(settings, names)
        for queue in names:
            if groups := engine.paused_groups(queue):
                self.stdout.write("%s: paused groups: %s" % (queue, ", ".join(
                    map(printable, groups))))  # read from Redis: anyone could have written them
            defaults, overrides = limits.get(queue, ("", []))
            if defaults:
                self.stdout.write("%s: each group: %s" % (queue, defaults))
            if overrides:
                self.stdout.write("%s: group limits: %s" % (queue, ", ".join(
                    "%s (%s)" % (o.group, _override_text(o)) for o in overrides)))


def _unreachable(engine: Engine, q: redis_state.QueueRow) -> list[str]:
    """The shards of sharded queue ``q`` (``hot#2``) whose node did not answer its read
    (its figures leave them out), each tried again on its own node; none when every
    shard answered."""
    names = engine.data_sets(q.queue)
    if len(names) <= q.shards:
        return []
    down = engine.unanswered(names)
    return ["%s#%d" % (q.queue, i) for i, name in enumerate(names) if name in down] or [
        "%d of its %d shards" % (len(names) - q.shards, len(names))]  # answers again now


def _left_out(shards: list[str]) -> str:
    return " (%s unreachable)" % ", ".join(shards) if shards else ""


TOGGLED = {  # action: what it did if it changed something, if not
    "pause": ("paused", "already paused"),
    "resume": ("resumed", "was not paused"),
    "unlimit": ("back to the queue's group limits", "had no limits of its own"),
}


def _said(action: str, group: str | None, done: Control) -> str:
    if action in TOGGLED:
        if_changed, if_not = TOGGLED[action]
        return if_changed if done.changed else if_not
    if done.limits is not None:
        return "limited to %s" % _override_text(done.limits)
    if group is None:
        return ("purged %d waiting job(s); their rows are cancelled; kept %d schedule "
                "tick(s) waiting" % (done.removed, done.ticks_kept))
    return "purged: %d waiting job(s); their rows are cancelled" % done.removed


def _override_text(o: GroupOverride) -> str:
    return group_limit_text(o.concurrency, o.rate_limit, "default")
