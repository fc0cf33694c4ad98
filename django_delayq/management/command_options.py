"""Command-line options shared by the management commands: the queues of ``--queues``,
and bad options (exit 2, nothing done, as argparse's own usage errors)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import CommandError
from django.utils.module_loading import import_string

from django_delayq.core.validation import QUEUE_NAME_RULE, not_a_queue_name

if TYPE_CHECKING:
    from django_delayq.core.conf import Settings

EXIT_USAGE = 2  # bad options, as argparse's own usage errors (the worker's EXIT_CONFIG)


def usage_error(message: str) -> CommandError:
    """A bad option or setting: exit code 2, nothing ran."""
    return CommandError(message, returncode=EXIT_USAGE)


def spark_extra(command: str, module: str, needs: str = "pyarrow: ") -> ModuleType:
    """``django_delayq.spark.<module>``, or a ``CommandError`` saying what to install."""
    try:
        return importlib.import_module("django_delayq.spark." + module)
    except ImportError as exc:
        raise CommandError("%s needs %spip install 'django-delayq[spark]' (%s)"
                           % (command, needs, exc)) from exc


def positive(name: str, value: float | None) -> None:
    """The option ``name``, when given, must be > 0."""
    if value is not None and value <= 0:
        raise usage_error("%s must be > 0, not %s" % (name, value))


def parse_queues(value: str | None, settings: Settings) -> tuple[str, ...]:
    """``--queues a,b`` -> the queues, in order; empty means every DELAYQ queue (a value
    of only commas and spaces is refused).

    A queue ``DELAYQ["QUEUES"]`` does not list is accepted only while a DelayQ Tasks
    backend has ``QUEUES: []`` (Django's "any queue": its tasks may name any queue, and a
    worker serves one by being started for it)."""
    if not value:
        return settings.queues
    queues = tuple(q.strip() for q in value.split(",") if q.strip())
    if not queues:  # "," or " ": not "every queue", which an empty value says
        raise CommandError("--queues %r names no queue" % value)
    unknown = [q for q in queues if q not in settings.queues]
    if unknown and not any_queue_backends():
        raise CommandError("unknown queue(s) %s; DELAYQ['QUEUES'] is %s"
                           % (unknown, list(settings.queues)))
    bad = [q for q in unknown if not_a_queue_name(q)]
    if bad:
        raise CommandError("not queue names: %s (a queue name is %s)" % (bad, QUEUE_NAME_RULE))
    return queues


def any_queue_backends() -> bool:
    """Whether a DelayQ Tasks backend is configured with ``QUEUES: []``."""
    return any(isinstance(params, dict) and params.get("QUEUES") == [] and _is_delayq(params)
               for params in (getattr(settings, "TASKS", None) or {}).values())


def _is_delayq(params: dict[str, Any]) -> bool:
    try:
        backend = import_string(str(params.get("BACKEND", "")))
        from django_delayq.backends import DelayQBackend  # lazy: it raises without Django Tasks
    except ImportError:
        return False
    return isinstance(backend, type) and issubclass(backend, DelayQBackend)
