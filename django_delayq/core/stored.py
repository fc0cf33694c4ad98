"""Reading a job row's JSON columns for display, whatever the row holds.

The ORM parses a JSON column as it loads the row, and a value nested a thousand levels
deep (a row written into the database directly: ``schedule()`` refuses more than
``validation.MAX_DEPTH`` levels) exhausts the stack there, deep inside a page being
rendered: the admin's job list, the dashboard and ``delayq_status`` would fail for
everyone. Their readers therefore select the columns as text (``as_text``) and parse
them here (``parse``): a value deeper than ``MAX_DEPTH`` is kept as its text, never
parsed, and shown as such.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db.models import JSONField, TextField
from django.db.models.functions import Cast
from django.db.models.query import QuerySet

from django_delayq.core import validation
from django_delayq.models import Job

#: The JSON columns of ``Job``.
JSON_FIELDS = tuple(f.name for f in Job._meta.concrete_fields if isinstance(f, JSONField))
TEXT = "%s_stored_text"  # the name of a column's text in ``with_text``


@dataclass(frozen=True, slots=True)
class Raw:
    """A stored value shown as its JSON text: too deeply nested to parse safely."""

    text: str


def as_text(field: str) -> Cast:
    """The column ``field`` as its JSON text (SQL ``NULL`` stays ``None``)."""
    return Cast(field, TextField())


def with_text(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """``queryset`` without loading the JSON columns, each selected as text instead
    (read with ``value``)."""
    deferred: QuerySet[Any] = queryset.defer(*JSON_FIELDS).annotate(
        **{TEXT % name: as_text(name) for name in JSON_FIELDS})
    return deferred


def parse(text: str | None) -> Any:
    """The value of a column's JSON ``text``: ``None`` for ``None``, a ``Raw`` for text
    nested deeper than ``validation.MAX_DEPTH`` (or that does not parse)."""
    if text is None:
        return None
    if validation.too_deep(text):
        return Raw(text)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return Raw(text)


def value(obj: object, name: str) -> Any:
    """Column ``name`` of a row loaded through ``with_text`` (``parse``d), or of one
    loaded whole."""
    text_name = TEXT % name
    return parse(obj.__dict__[text_name]) if text_name in obj.__dict__ else getattr(obj, name)
