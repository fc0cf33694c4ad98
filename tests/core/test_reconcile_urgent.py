"""The reconciler's urgent walks: the loss passes share one budget per tick and the pass
after an outage has its own, so neither waits for the other to finish; a queue lost again
starts its pass over behind the other loss passes."""

from __future__ import annotations

import time

import pytest

from django_delayq import schedule
from django_delayq.core import reconcile
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import AFTER_OUTAGE, Reconciler
from django_delayq.core.reconcile_state import Cursor

pytestmark = pytest.mark.django_db(transaction=True)

BUDGET_S = 0.2  # a batch outlasts it by 0.1 s: no room for a second batch under load


def _slow_reconciler(monkeypatch: pytest.MonkeyPatch, walked: list[str]) -> Reconciler:
    """A reconciler whose every batch (real: rows read, Redis asked) outlasts the urgent
    budget, naming the walk it served in ``walked``."""
    monkeypatch.setattr(reconcile, "URGENT_BUDGET_SECONDS", BUDGET_S)
    reconciler = Reconciler(get_engine(), get_settings(), ("default", "emails"))
    batch = reconciler._batch

    def slow(cursor: Cursor) -> None:
        batch(cursor)
        walked.append("incremental" if cursor is reconciler._cursor
                      else cursor.queues[0] if cursor.lost else "outage")
        time.sleep(BUDGET_S + 0.1)

    monkeypatch.setattr(reconciler, "_batch", slow)
    return reconciler


def test_a_loss_pass_and_the_pass_after_an_outage_both_progress(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch) -> None:
    for _ in range(4):  # more rows than one batch of each walk reads
        schedule("tests.jobs.noop", delay=3600)
    walked: list[str] = []
    reconciler = _slow_reconciler(monkeypatch, walked)
    reconciler._urgent = {"default": Cursor(("default",), 0.0, lost=True, batch=1),
                          AFTER_OUTAGE: Cursor(("default", "emails"), 0.0, batch=1)}
    for _ in range(2):
        reconciler._tick()
    assert walked.count("default") == 2 and walked.count("outage") == 2, walked


def test_a_queue_lost_again_goes_behind_the_other_loss_passes(  # type: ignore[no-untyped-def]
        delayq_settings, monkeypatch) -> None:
    for queue in ("default", "emails"):
        for _ in range(4):
            schedule("tests.jobs.noop", delay=3600, queue=queue)
    walked: list[str] = []
    reconciler = _slow_reconciler(monkeypatch, walked)
    reconciler._urgent = {q: Cursor((q,), 0.0, lost=True, batch=1) for q in ("default", "emails")}
    monkeypatch.setattr(reconciler, "check_epochs", lambda: ["default"])  # lost every look
    monkeypatch.setattr(reconcile, "EPOCH_CHECK_SECONDS", 0.0)
    for _ in range(2):
        reconciler._tick()
    assert "emails" in walked, walked
