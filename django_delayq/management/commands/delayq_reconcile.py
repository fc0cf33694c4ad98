"""``manage.py delayq_reconcile``: put jobs whose rows are live but missing from Redis back.

Runs the worker's reconciler once over every live row (``Reconciler.run_all``). When
Redis lost a queue's data (its epoch key is gone, and the queue holds nothing), or with
``--assume-lost``, rows are re-enqueued without grace, running ones included. Live rows of
jobs already dead in Redis (their worker died before recording it) are settled ``dead``.
Idempotent: run it as often as you like.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from redis.exceptions import RedisError

from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.core.reconcile_state import BATCH
from django_delayq.management.command_options import parse_queues, usage_error


class Command(BaseCommand):
    help = "Re-enqueue jobs whose audit rows are live but which Redis does not hold."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", "-q", default=None,
                            help="Comma-separated queues (default: all).")
        parser.add_argument("--grace", type=float, default=None,
                            help="Skip rows changed in the last GRACE seconds "
                                 "(default: DELAYQ['RECONCILE_GRACE_SECONDS']).")
        parser.add_argument("--assume-lost", action="store_true",
                            help="Treat Redis as having lost its data: no grace, running "
                                 "rows re-enqueued too (may run jobs in flight twice).")
        parser.add_argument("--batch", type=int, default=BATCH, help="Rows per query.")
        parser.add_argument("--dry-run", action="store_true",
                            help="Only count (and with -v 2 list) what would be re-enqueued.")

    def handle(self, *args: object, **options: Any) -> None:
        settings = get_settings()
        queues = parse_queues(options["queues"], settings)
        if options["batch"] < 1:
            raise usage_error("--batch must be >= 1, not %d" % options["batch"])
        reconciler = Reconciler(get_engine(), settings, queues)
        try:
            count = reconciler.run_all(options["batch"], options["grace"],
                                       assume_lost=options["assume_lost"],
                                       dry_run=options["dry_run"])
        except RedisError as exc:
            raise CommandError("Redis is unavailable: %s" % exc) from exc
        st = reconciler.stats
        verb = "would re-enqueue" if options["dry_run"] else "re-enqueued"
        settled = len(st.to_settle) if options["dry_run"] else st.settled
        self.stdout.write("%d live row(s) examined, %s %d job(s); %s %d row(s) of jobs final "
                          "in Redis; %d left to a live worker, %d orphaned envelope(s)"
                          % (st.examined, verb, count,
                             "would settle" if options["dry_run"] else "settled", settled,
                             st.waiting_on_live_worker, st.orphans))
        if options["dry_run"] and options["verbosity"] >= 2:
            for job_id in st.missing:
                self.stdout.write(job_id)
            for job_id in st.to_settle:
                self.stdout.write("%s (final in Redis)" % job_id)
