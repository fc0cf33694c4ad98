"""``manage.py delayq_report --input DIR --out DIR [--master ...]``: the PySpark report."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_delayq.management.command_options import spark_extra, usage_error
from django_delayq.models import Job, JobAttempt


class Command(BaseCommand):
    help = ("Compute lateness, run time, throughput, outcomes and errors per queue and callable "
            "with PySpark; write report.json, CSV files, PNG charts and report.html.")

    def add_arguments(self, parser: CommandParser) -> None:
        spark_extra("delayq_report", "report", needs="").add_arguments(parser)

    def _jdbc_properties(self, options: dict[str, Any]) -> dict[str, str | None]:
        db: dict[str, Any] = dict(settings.DATABASES.get("default", {}))
        given = {key: options["jdbc_" + key] or db.get(key.upper()) for key in ("user", "password")}
        given["driver"] = options["jdbc_driver"]  # None: the one of the URL's database
        return {key: str(value) if value else None for key, value in given.items()}

    def handle(self, *args: object, **options: Any) -> None:
        from django_delayq.spark import preflight, report, session  # lazy: the Spark extra

        if problem := report.check_arguments(options):
            raise usage_error(problem)  # bad options: exit 2, as argparse
        try:  # before Spark starts (seconds), let alone computes (minutes)
            preflight.check_paths(options["out"], None if options["jdbc_url"] else options["input"])
        except FileNotFoundError as exc:  # --input names no export: a bad option
            raise usage_error(str(exc)) from exc
        except ValueError as exc:  # --out cannot be written: a failure, exit 1
            raise CommandError(str(exc)) from exc
        spark = session.build_session(options["master"] or "local[*]",
                                      app_name="delayq-report", jars=[options["jdbc_jar"] or ""])
        try:
            files = report.run_report(
                spark, options["out"], input=options["input"], jdbc_url=options["jdbc_url"],
                jdbc_table=options["jdbc_table"] or Job._meta.db_table,
                jdbc_attempts_table=options["jdbc_attempts_table"] or JobAttempt._meta.db_table,
                jdbc_properties=self._jdbc_properties(options) if options["jdbc_url"] else None,
                bucket_seconds=options["bucket_seconds"],
                progress=options["verbosity"] > 0, stream=getattr(self.stderr, "_out", None))
        except (FileNotFoundError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write("%d jobs; report written to %s" % (files.report["jobs"], files.html))
