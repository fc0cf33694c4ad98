"""``manage.py delayq_worker``: a thin adapter from argv to ``Worker(...).run()``, or to
``Supervisor(...).run()`` with ``--processes``.

``--metrics-port`` listens on ``--metrics-addr``, loopback unless the operator names
another address: the metrics page names queues and callables and has no authentication.
With ``--processes N`` the child of slot i (0..N-1) serves its own metrics on port + i.

Exit codes (``worker.loop``): 0 stopped cleanly (drained, or ``--burst``/``--max-jobs``
done), 1 an error stopped the worker, 2 a bad setting or option (nothing ran; an error
of the system checks run first included), 3 stopped hard (a second SIGTERM/SIGINT).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser, SystemCheckError

from django_delayq.core.conf import Settings, get_settings
from django_delayq.core.connection import get_engine
from django_delayq.engine.server_mode import WrongRedisMode
from django_delayq.management.command_options import parse_queues, positive, usage_error
from django_delayq.observe import prometheus
from django_delayq.worker.loop import StopAsked, Worker, WorkerOptions, attach, wait_for_redis
from django_delayq.worker.processes.children import can_measure_memory
from django_delayq.worker.processes.supervisor import Supervisor, SupervisorOptions
from django_delayq.worker.signals_relay import signal_relay
from django_delayq.worker.tracking import EXIT_CONFIG, EXIT_ERROR, EXIT_OK, Supervision

METRICS_ADDR = "127.0.0.1"  # loopback: a scraper on another host needs --metrics-addr


def parse_processes(value: str | None) -> int | None:
    """``--processes``: None (one process, no supervisor), a number >= 1, or ``auto``."""
    if value is None:
        return None
    if value == "auto":
        return os.cpu_count() or 1
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise usage_error("--processes must be a number >= 1 or 'auto', not %r" % value)
    return n


def show_logs(level: int) -> None:
    """The worker's own handler, at ``level`` (``-v``'s), only where the project's LOGGING
    gave none to the package's loggers (or the root): else each line would print twice.
    The project's logging decides what its handlers show."""
    if not logging.getLogger("django_delayq").hasHandlers():
        logging.basicConfig(
            level=level, format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")


class Command(BaseCommand):
    help = "Run a django-delayq worker: claim due jobs, run them, settle them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", "-q", default=None,
                            help="Comma-separated queues, in priority order (default: all).")
        parser.add_argument("--concurrency", "-c", type=int, default=None,
                            help="Threads running jobs, per process (default: "
                                 "DELAYQ['CONCURRENCY']).")
        parser.add_argument("--processes", default=None, metavar="N",
                            help="Run N worker processes (a number, or 'auto': one per CPU) "
                                 "under a supervisor that restarts them and enforces hard "
                                 "time limits. Default: this one process.")
        parser.add_argument("--max-jobs-per-child", type=int, default=None,
                            help="With --processes: a process that claimed this many jobs "
                                 "finishes them, exits and is replaced.")
        parser.add_argument("--max-memory-per-child", type=float, default=None, metavar="MB",
                            help="With --processes: a process using more resident memory "
                                 "finishes its jobs, exits and is replaced.")
        parser.add_argument("--prefetch", type=int, default=None, metavar="N",
                            help="Claimed jobs each process holds beyond its free threads "
                                 "(default: what its threads start within 0.1 s at the pace "
                                 "of its recent jobs, at most CLAIM_BATCH).")
        parser.add_argument("--burst", action="store_true",
                            help="Run every job due now, then exit.")
        parser.add_argument("--max-jobs", type=int, default=None,
                            help="Exit (gracefully) after claiming this many jobs.")
        parser.add_argument("--worker-id", default=None,
                            help="The worker's name (default host:pid); rows and the "
                                 "registry show it followed by a token of this start.")
        parser.add_argument("--metrics-port", type=int, default=None,
                            help="Serve Prometheus /metrics on this port (needs "
                                 "django-delayq[prometheus]).")
        parser.add_argument("--metrics-addr", default=None,
                            help="Address --metrics-port listens on (default %s, this host "
                                 "only; 0.0.0.0 or :: for every interface)." % METRICS_ADDR)
        # set by --processes on the command line of each child
        parser.add_argument("--supervised", default=None, help=argparse.SUPPRESS)

    def check(self, *args: Any, **kwargs: Any) -> None:
        """Django's system checks (unless ``--skip-checks``), whose errors exit 2, as a bad
        setting that ``get_settings()`` refuses does: Django's own code for any
        ``CommandError`` is 1, and ``run_from_argv`` exits with the error's ``returncode``
        (Django 5.2 and 6.x alike)."""
        try:
            super().check(*args, **kwargs)
        except SystemCheckError as exc:
            exc.returncode = EXIT_CONFIG
            raise
        except ImproperlyConfigured as exc:  # a check that could not run: a bad setting it
            self.stderr.write("delayq_worker: %s" % exc)  # reads (a Tasks backend's OPTIONS)
            sys.exit(EXIT_CONFIG)

    def handle(self, *args: object, **options: Any) -> None:
        try:
            settings = get_settings()
        except ImproperlyConfigured as exc:
            self.stderr.write("delayq_worker: %s" % exc)
            sys.exit(EXIT_CONFIG)
        try:
            queues = parse_queues(options["queues"], settings)
        except CommandError as exc:
            raise usage_error(str(exc)) from exc
        concurrency = (settings.concurrency if options["concurrency"] is None
                       else options["concurrency"])
        if concurrency < 1:
            raise usage_error("--concurrency must be >= 1 (threads running jobs in each "
                              "process), not %d" % concurrency)
        processes = self.check_processes(options)
        port = options["metrics_port"]  # with --processes N: port .. port + N - 1
        if port is not None and not 1 <= port <= 65536 - (processes or 1):
            raise usage_error("--metrics-port must be a port 1..65535 (with --processes N, "
                              "each of port .. port + N - 1), not %d" % port)
        if port is None and options["metrics_addr"] is not None:
            raise usage_error("--metrics-addr %s needs --metrics-port: no metrics are served "
                              "without it" % options["metrics_addr"])
        if options["metrics_addr"] is None:
            options["metrics_addr"] = METRICS_ADDR
        if port is not None and prometheus.prom is None:
            raise usage_error("--metrics-port needs prometheus-client: "
                              "pip install 'django-delayq[prometheus]'")
        show_logs(logging.INFO if options["verbosity"] >= 1 else logging.WARNING)
        try:
            if processes is None:
                code = self.run_worker(settings, queues, concurrency, options)
            else:
                code = self.run_supervisor(settings, queues, concurrency, processes, options)
        except WrongRedisMode as exc:  # at start-up (wait_for_redis): a setting to fix
            self.stderr.write("delayq_worker: %s" % exc)
            sys.exit(EXIT_CONFIG)
        if code:
            sys.exit(code)

    def check_processes(self, options: dict[str, Any]) -> int | None:
        processes = parse_processes(options["processes"])
        if options["prefetch"] is not None and options["prefetch"] < 0:
            raise usage_error("--prefetch must be >= 0, not %d" % options["prefetch"])
        for name in ("max_jobs_per_child", "max_memory_per_child", "max_jobs"):
            positive("--" + name.replace("_", "-"), options[name])
        if processes is None:
            for name in ("max_jobs_per_child", "max_memory_per_child"):
                if options[name] is not None:
                    raise usage_error("--%s needs --processes" % name.replace("_", "-"))
            return None
        if options["max_jobs"] is not None:
            raise usage_error("--max-jobs counts the jobs of one process; with --processes "
                              "use --max-jobs-per-child")
        if options["max_memory_per_child"] is not None and not can_measure_memory():
            raise usage_error("--max-memory-per-child needs psutil or /proc")
        return processes

    def run_worker(self, settings: Settings, queues: tuple[str, ...], concurrency: int,
                   options: dict[str, Any]) -> int:
        supervision = Supervision.decode(options["supervised"]) if options["supervised"] else None
        stop = StopAsked(signal_relay())  # until the worker's own handlers
        engine = wait_for_redis(get_engine, stop,
                                supervision.orphaned if supervision else lambda: False)
        if engine is None:
            return EXIT_OK if stop.asked else EXIT_ERROR
        worker = Worker(engine, settings, WorkerOptions(
            queues=queues, concurrency=concurrency, burst=options["burst"],
            max_jobs=options["max_jobs"], prefetch=options["prefetch"],
            worker_id=options["worker_id"],
            supervision=supervision))
        if options["metrics_port"] is not None:
            addr, port = options["metrics_addr"], options["metrics_port"]
            try:
                prometheus.start_http_server(port, addr=addr, queues=queues)
            except OSError as exc:
                raise CommandError("cannot serve metrics on %s port %d: %s" % (addr, port, exc)
                                   ) from exc
        worker.install_signal_handlers(stop)  # asked meanwhile: it drains at once
        if supervision is not None:
            attach(worker, supervision)
        code = worker.run()
        if supervision is not None:
            supervision.link.flush()
        return code

    def run_supervisor(self, settings: Settings, queues: tuple[str, ...], concurrency: int,
                       processes: int, options: dict[str, Any]) -> int:
        argv = [sys.executable, "-m", "django", "delayq_worker", "--queues", ",".join(queues),
                "--concurrency", str(concurrency), "-v", str(options["verbosity"])]
        if options["max_jobs_per_child"] is not None:
            argv += ["--max-jobs", str(options["max_jobs_per_child"])]
        if options["prefetch"] is not None:
            argv += ["--prefetch", str(options["prefetch"])]
        if options["burst"]:
            argv.append("--burst")
        stop = StopAsked()  # until the supervisor's own handlers
        engine = wait_for_redis(get_engine, stop)
        if engine is None:
            return EXIT_OK
        supervisor = Supervisor(engine, settings, SupervisorOptions(
            processes=processes, child_argv=argv, burst=options["burst"],
            max_jobs_per_child=options["max_jobs_per_child"],
            max_memory_mb=options["max_memory_per_child"], worker_id=options["worker_id"],
            metrics_port=options["metrics_port"], metrics_addr=options["metrics_addr"]))
        supervisor.install_signal_handlers()
        if stop.asked:  # between the wait and the handlers: drain at once
            supervisor.signals += 1
        return supervisor.run()
