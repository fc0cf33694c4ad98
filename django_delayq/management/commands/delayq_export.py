"""``manage.py delayq_export --out DIR``: audit rows -> day-partitioned Parquet, incrementally.

``--overlap`` sets how far before the last run's high-water mark a run reads again (the
clock difference between the exporting machine and those that schedule jobs or act in
the admin, plus their longest transaction; ``django_delayq.spark.export`` explains it).
``--exclude`` and ``--redact`` keep columns (``args`` with tokens, personal data in
``kwargs`` or ``result``) out of the files; ``django_delayq.spark.export`` explains both.
The attempt rows (``JobAttempt``) go with them, under the same choice
(``django_delayq.spark.export_attempts``).
"""

from __future__ import annotations

from argparse import ArgumentTypeError
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_delayq.management.command_options import positive, spark_extra, usage_error

MAX_OVERLAP = 365 * 86400  # a longer re-read (or settle) is a --full export


def seconds(option: str, value: float) -> timedelta:
    """``--settle`` or ``--overlap``: from 0 to a year, else a usage error naming it."""
    if not 0 <= value <= MAX_OVERLAP:  # also refuses nan
        raise usage_error("%s must be a number of seconds from 0 to %d (a year), not %r"
                          % (option, MAX_OVERLAP, value))
    return timedelta(seconds=value)


def parse_when(text: str) -> datetime:
    """An ISO date or datetime; a naive one is read in the current time zone. A value it
    cannot read is a usage error naming it (argparse: exit 2, no traceback)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise ArgumentTypeError("%r is not an ISO date or datetime; give a date such as "
                                "2025-01-31 or a datetime such as 2025-01-31T12:00:00+00:00 "
                                "(naive ones are read in TIME_ZONE)" % (text,)) from None
    return timezone.make_aware(value) if timezone.is_naive(value) else value


class Command(BaseCommand):
    help = ("Export audit rows (jobs, and their attempts) to Parquet under "
            "OUT/jobs/day=YYYY-MM-DD/ and OUT/attempts/day=YYYY-MM-DD/, incrementally.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="Export directory (created if absent).")
        parser.add_argument("--since", type=parse_when, help="Only jobs created at/after this.")
        parser.add_argument("--until", type=parse_when, help="Only jobs created before this.")
        parser.add_argument("--full", action="store_true",
                            help="Ignore the high-water mark and export every row in range.")
        parser.add_argument("--chunk-size", type=int, default=5000,
                            help="Rows per database page (default 5000).")
        parser.add_argument("--settle", type=float, default=2.0,
                            help="Leave rows updated in the last N seconds to the next run.")
        parser.add_argument("--overlap", type=float, default=None, metavar="SECONDS",
                            help="Read again the rows updated this long before the last run's "
                                 "mark (default 60): more than the clock skew between this "
                                 "machine and the writers, plus their longest transaction.")
        parser.add_argument("--exclude", action="append", metavar="COL[,COL]",
                            help="Leave these columns out of the files (e.g. args,kwargs).")
        parser.add_argument("--redact", action="append", metavar="COL[,COL]",
                            help="Write '[redacted]' instead of these text columns' values.")

    def handle(self, *args: object, **options: Any) -> None:
        export = spark_extra("delayq_export", "export")
        positive("--chunk-size", options["chunk_size"])
        overlap = options["overlap"]
        settle = seconds("--settle", options["settle"])
        overlap = export.DEFAULT_OVERLAP if overlap is None else seconds("--overlap", overlap)
        try:
            result = export.export_jobs(
                options["out"], since=options["since"], until=options["until"],
                full=options["full"], chunk_size=options["chunk_size"], settle=settle,
                progress=options["verbosity"] > 0, stream=getattr(self.stderr, "_out", None),
                exclude=options["exclude"], redact=options["redact"], overlap=overlap)
        except export.BadArgument as exc:  # nothing read or written: exit 2
            raise usage_error(str(exc)) from exc
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        attempts = "" if result.attempt_rows is None else \
            " and %d attempt rows" % result.attempt_rows
        self.stdout.write("exported %d rows%s in %d files; high-water mark %s"
                          % (result.rows, attempts, len(result.files), result.mark.isoformat()))
        if result.attempt_rows is None:
            self.stdout.write("attempt rows not exported: %s was begun before delayq_export "
                              "wrote them (its report has no failed-attempt figure); export to "
                              "a new directory to have them" % options["out"])
