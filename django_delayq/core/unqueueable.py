"""Rows whose job can never be enqueued: an id the scripts refuse (``engine.bad_id``:
empty, over 256 bytes, control characters, not UTF-8), which only a row written into the
database directly can have (the API makes every id). The reconciler ends such a row
``dead`` before it re-enqueues the others (``split``, ``Reconciler._enqueue``): re-enqueued,
every claim would set it aside and the next pass put it back, for ever. It is written as
every row the reconciler ends (``reconcile_state.settle_row``): at the attempt a claim
would have charged (the row's count + 1), its reason on the row and on a dead attempt;
it sends ``job_dead`` and resolves its waiting children, like any death.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_delayq.engine import bad_id
from django_delayq.exceptions import InvalidRow, type_path

if TYPE_CHECKING:
    from django_delayq.models import Job

INVALID_ROW = type_path(InvalidRow)


def split(rows: list[Job]) -> tuple[list[Job], list[tuple[Job, str]]]:
    """Those of ``rows`` that can be enqueued, and those that never can, with the reason
    (their ``last_error``)."""
    reasons = [(row, bad_id(row.pk)) for row in rows]
    return ([row for row, why in reasons if why is None],
            [(row, "invalid row: %s: it cannot be enqueued" % why) for row, why in reasons
             if why is not None])
