"""``manage.py delayq_prune --older-than 30d [--archive DIR]``: archive, then delete."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_delayq.management.command_options import positive, spark_extra, usage_error


class Command(BaseCommand):
    help = ("Delete finished jobs (succeeded, dead, cancelled) that finished longer ago than "
            "--older-than, with their attempt rows; with --archive, write them to Parquet first.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", required=True, help="Age such as 30d, 12h, 90m, 2w.")
        parser.add_argument("--archive", help="Archive directory (same layout as delayq_export).")
        parser.add_argument("--batch-size", type=int, default=2000,
                            help="Rows archived and deleted per transaction (default 2000).")
        parser.add_argument("--dry-run", action="store_true", help="Only count what would go.")

    def handle(self, *args: object, **options: Any) -> None:
        prune = spark_extra("delayq_prune", "prune")
        positive("--batch-size", options["batch_size"])
        try:
            age = prune.parse_age(options["older_than"])
        except ValueError as exc:
            raise usage_error("--older-than: %s" % exc) from exc
        try:
            result = prune.prune_jobs(age, archive=options["archive"],
                                batch_size=options["batch_size"], dry_run=options["dry_run"],
                                progress=options["verbosity"] > 0,
                                stream=getattr(self.stderr, "_out", None))
        except ValueError as exc:  # an archive directory it refuses: one line, no traceback
            raise CommandError(str(exc)) from exc
        verb = "would delete" if options["dry_run"] else "deleted"
        self.stdout.write("%s %d jobs finished before %s (%d attempt rows); %d archive files"
                          % (verb, result.jobs, result.cutoff.isoformat(), result.attempts,
                             len(result.files)))
