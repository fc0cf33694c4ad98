"""A lease token is never handed out twice, even across a Redis loss that no reconciler
saw and that the audit rows show no trace of: a job delivered in the lost data (its
worker still holds the copy, not started, so its row says nothing) is re-enqueued
uncharged, and its next delivery's token is one no earlier delivery had; the stale
holder's ack and extend are refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.models import Job
from tests.helpers import point_at, wait_until
from tests.reliability.test_loss_attempts import LEASE_MS, _claim

pytestmark = pytest.mark.django_db(transaction=True)



def test_a_copy_held_across_an_unseen_loss_keeps_a_token_of_its_own(  # type: ignore[no-untyped-def]
        settings, volatile_server) -> None:
    point_at(settings, volatile_server, RECONCILE_GRACE_SECONDS=1)
    h = schedule("tests.jobs.noop")
    Job.objects.filter(pk=h.id).update(created_at=Job.objects.get(pk=h.id).created_at
                                       - timedelta(seconds=600))
    engine = get_engine()
    held = _claim(h.id)  # a worker W prefetched it and holds it, not started
    assert Job.objects.get(pk=h.id).attempts == 0  # no run: the row counts none
    Job.objects.filter(pk=h.id).update(
        updated_at=Job.objects.get(pk=h.id).updated_at - timedelta(seconds=600),
        run_at=Job.objects.get(pk=h.id).run_at - timedelta(seconds=600))
    volatile_server.restart()  # every key gone; no reconciler was looking
    later = Reconciler(engine, get_settings(), ("default",))  # started after the loss
    wait_until(lambda: later.tick() >= 0
               and engine.inspect("default", h.id).place != "", timeout=60)
    for _ in range(2):  # delivered again, handed back unstarted, delivered again
        again = _claim(h.id)
        assert again.attempt == 1  # never ran: not charged
        assert again.token > held.token, (again.token, held.token)
        assert not engine.extend("default", [(held.id, held.token)], LEASE_MS)[0]
        assert not engine.ack("default", [(held.id, held.token)])[0]  # W's stale copy
        assert engine.release("default", [again]) == [True]
