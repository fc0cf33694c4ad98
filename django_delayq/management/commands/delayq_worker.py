"""``manage.py delayq_worker``: a thin adapter from argv to ``Worker(...).run()``.

``--metrics-port`` listens on ``--metrics-addr``, loopback unless the operator names
another address: the metrics page names queues and callables and has no authentication.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_delayq.management.options import parse_queues
from django_delayq.worker.loop import EXIT_CONFIG, Worker, WorkerOptions, wait_for_redis

METRICS_ADDR = "127.0.0.1"  # loopback: a scraper on another host needs --metrics-addr


class Command(BaseCommand):
    help = "Run a django-delayq worker: claim due jobs, run them, settle them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", "-q", default=None,
                            help="Comma-separated queues, in priority order (default: all).")
        parser.add_argument("--concurrency", "-c", type=int, default=None,
                            help="Threads running jobs (default: DELAYQ['CONCURRENCY']).")
        parser.add_argument("--burst", action="store_true",
                            help="Run every job due now, then exit.")
        parser.add_argument("--max-jobs", type=int, default=None,
                            help="Exit (gracefully) after claiming this many jobs.")
        parser.add_argument("--worker-id", default=None, help="Name shown in audit rows.")
        parser.add_argument("--metrics-port", type=int, default=None,
                            help="Serve Prometheus /metrics on this port (needs "
                                 "django-delayq[prometheus]).")
        parser.add_argument("--metrics-addr", default=METRICS_ADDR,
                            help="Address --metrics-port listens on (default %s, this host "
                                 "only; 0.0.0.0 or :: for every interface)." % METRICS_ADDR)

    def handle(self, *args: Any, **options: Any) -> None:
        from django_delayq.core.conf import get_settings
        from django_delayq.core.connection import get_engine

        try:
            settings = get_settings()
        except ImproperlyConfigured as exc:
            self.stderr.write("delayq_worker: %s" % exc)
            sys.exit(EXIT_CONFIG)
        queues = parse_queues(options["queues"], settings)
        concurrency = options["concurrency"] or settings.concurrency
        if concurrency < 1:
            raise CommandError("--concurrency must be >= 1, not %d" % concurrency)
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO if options["verbosity"] >= 1 else
                                logging.WARNING,
                                format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        engine = wait_for_redis(get_engine)
        worker = Worker(engine, settings, WorkerOptions(
            queues=queues, concurrency=concurrency, burst=options["burst"],
            max_jobs=options["max_jobs"], worker_id=options["worker_id"]))
        if options["metrics_port"] is not None:
            self.serve_metrics(options["metrics_addr"], options["metrics_port"])
        worker.install_signal_handlers()
        code = worker.run()
        if code:
            sys.exit(code)

    def serve_metrics(self, addr: str, port: int) -> None:
        from django_delayq.observe import metrics

        try:
            metrics.start_http_server(port, addr=addr)
        except OSError as exc:
            raise CommandError("cannot serve metrics on %s port %d: %s" % (addr, port, exc)
                               ) from exc
