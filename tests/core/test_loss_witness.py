"""After a loss that took the workers registry, the reconciler judges a due row by the
workers it saw registered just before the loss (``core/loss_witness.py``): no attempt is
charged once they have all heartbeated after it; one is when one of them went silent;
without a fresh view of the registry, the charge is the conservative one.

The reconcilers are real, driven by ``tick()``; the workers are registry entries."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_delayq import schedule
from django_delayq.core.conf import get_settings
from django_delayq.core.connection import get_engine
from django_delayq.core.reconcile import Reconciler
from django_delayq.core.reconcile_state import UNRECORDED
from django_delayq.models import Job, JobAttempt
from tests.helpers import point_at, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _wipe(prefix: str) -> None:
    client = get_engine().client
    for key in list(client.scan_iter(match="{%s*" % prefix, count=1000)):
        client.delete(key)


def _seen_registered(beating: bool = True) -> tuple[Reconciler, str]:
    """A reconciler that has kept a registry read (worker ``w1``) before a due row's loss."""
    engine = get_engine()
    engine.register_worker("w1", "{}")
    h = schedule("tests.jobs.noop")
    Job.objects.filter(pk=h.id).update(run_at=Job.objects.get(pk=h.id).run_at
                                       - timedelta(seconds=30))
    r = Reconciler(engine, get_settings(), ("default",))

    def kept() -> bool:
        if beating:
            engine.register_worker("w1", "{}")
        r.tick()
        return "default" in r._witness._kept
    wait_until(kept, timeout=30)
    return r, h.id


def _put_back(r: Reconciler, job_id: str, beating: bool) -> int:
    """Tick ``r`` (``w1`` heartbeating or not) until the job is back; its seed."""
    engine = get_engine()

    def back() -> bool:
        if beating:
            engine.register_worker("w1", "{}")
        r.tick()
        return engine.inspect("default", job_id).place != ""
    wait_until(back, timeout=60, step=0.1)
    return engine.presence("default", [job_id])[0].attempts


@pytest.mark.parametrize("alive", [True, False])
def test_a_loss_charges_a_due_row_only_when_a_worker_seen_before_it_went_silent(  # type: ignore[no-untyped-def]
        settings, redis_server, alive: bool) -> None:
    point_at(settings, redis_server, LEASE_SECONDS=3.0, RECONCILE_GRACE_SECONDS=3600)
    r, job_id = _seen_registered()
    _wipe(settings.DELAYQ["PREFIX"])
    seed = _put_back(r, job_id, beating=alive)
    assert "default" in r._witness.views
    charged = list(JobAttempt.objects.filter(job_id=job_id).values_list("number", "error"))
    if alive:  # heard from after the loss: it ran nothing unrecorded
        assert (seed, charged, Job.objects.get(pk=job_id).attempts) == (0, [], 0)
    else:  # silent since: it may have run the job and died before recording it
        assert (seed, charged) == (1, [(1, UNRECORDED)])


def test_a_stale_registry_read_leaves_the_conservative_charge(settings, redis_server) -> None:  # type: ignore[no-untyped-def]
    """The check after the read began long after it (the keeper held up): a worker may have
    joined, run the job and died unseen."""
    point_at(settings, redis_server, LEASE_SECONDS=3.0, RECONCILE_GRACE_SECONDS=3600)
    r, job_id = _seen_registered()
    r._witness._kept["default"].read_at -= 10
    _wipe(settings.DELAYQ["PREFIX"])
    assert _put_back(r, job_id, beating=True) == 1
    assert "default" not in r._witness.views
