"""The settled records of workers gone silent: jobs acked whose rows may say anything.

A worker killed between its ack (``Engine.ack`` with a holder leaves a settled record in
Redis) and its audit flush leaves a row that does not say the job ended: ``running``
when the flush of its start had landed, else ``scheduled`` or ``retrying``. The running
rows name their worker, and ``Liveness.orphaned`` finds them in the database; the others
do not, and only Redis knows whose they are. So at the same look (every lease,
``Reconciler._look_at_orphans``) the reconciler reads the settled records written more
than two leases ago, oldest first (``Engine.settled_before``, at most ``PAGES`` pages of
``BATCH`` per data set): a live worker forgets its records once its rows have landed
(within a flush), so the read finds none unless a worker died, or stalls on its
database. The live rows of the records whose holder is silent (no heartbeat for two
leases: ``Liveness.alive``) get the same second look as a silent worker's running rows,
then are settled from the record (``reconcile_state.settle``): within seconds of the
silence, whatever the row said, not after ``RECONCILE_GRACE_SECONDS``. A live worker's
records are left to it (its flush is on its way, however long the database keeps it
waiting), and a row that changed between the looks is left alone.

A silent holder's record whose row is final already (its flush landed, the kill came
before it forgot the record) is forgotten here, as the holder would have: such records
would otherwise fill the pages until the day's keep time drops them.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING

from django_delayq.core.reconcile_state import BATCH, LIGHT, SETTLED_KEEP_MS, Liveness, Read
from django_delayq.engine.replies import grouped
from django_delayq.engine.shard_health import ERRORS
from django_delayq.models import LIVE_STATUSES, Job

if TYPE_CHECKING:
    from django_delayq.engine import Engine

logger = logging.getLogger(__name__)

PAGES = 4  # pages of records read per data set and look


def of_silent(engine: Engine, live: Liveness, queues: Sequence[str],
              batch: int = BATCH) -> dict[str, str]:
    """The jobs (id -> queue) of ``queues`` whose settled record, written two leases ago
    or earlier, names a worker that is silent now; at most about ``batch``. A data set
    whose node does not answer is left for a later look (a cluster's other nodes are
    read); without a cluster, Redis's error is raised."""
    before = engine.time_ms() - 2 * live.settings.lease_ms
    found: dict[str, str] = {}
    alive: dict[str, bool] = {}  # holder -> alive, asked once per look
    for queue in queues:
        for name in engine.data_sets(queue):
            for page in range(PAGES):
                if len(found) >= batch:
                    return found
                try:
                    records = engine.settled_before(name, before, batch, page * batch)
                except ERRORS:
                    if not engine.nodes_fail_alone:
                        raise
                    break
                if new := {r.holder for _, r in records} - alive.keys():
                    heard = live.alive(new)
                    alive.update({holder: holder in heard for holder in new})
                found.update({pk: queue for pk, r in records if not alive[r.holder]})
                if len(records) < batch:
                    break
    return found


def silent_rows(engine: Engine, live: Liveness, queues: Sequence[str], skip: Container[str],
                batch: int, read: Read) -> list[Job]:
    """The live rows (not in ``skip``) of the jobs settled in Redis by workers now silent
    (``of_silent``), read as ``Liveness.orphaned`` reads its rows (``read``); the records
    of those whose rows are final are forgotten."""
    found = {pk: queue for pk, queue in of_silent(engine, live, queues, batch).items()
             if pk not in skip}
    if not found:
        return []
    statuses = dict(Job.objects.filter(pk__in=list(found)).values_list("pk", "status"))
    landed = [pk for pk, status in statuses.items() if status not in LIVE_STATUSES]
    for queue, ids in grouped(landed, found.__getitem__).items():
        engine.forget_settled(queue, ids, keep_ms=SETTLED_KEEP_MS)
        logger.debug("reconciler: %d settled record(s) of silent workers forgotten in queue "
                     "%r (their rows are final)", len(ids), queue)
    if not (pending := [pk for pk in statuses if pk not in landed]):
        return []
    return read(Job.objects.filter(pk__in=pending, status__in=LIVE_STATUSES).only(*LIGHT)
                .order_by("updated_at"), batch)
