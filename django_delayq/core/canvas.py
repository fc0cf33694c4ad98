"""``chain(a, b, c)`` and ``group([...], then=summary)``: thin helpers over ``after=``.

Each piece is a ``Signature``, ``job(fn).using(...).s(*args, **kwargs)``: the call's
options (queue, delay, priority, its own ``after`` ...) and the job's arguments. Every
job of one helper call is scheduled in one transaction: all of them or none.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Any

from django.db import router, transaction

from django_delayq.core.api import JobCall, JobHandle, JobSpec
from django_delayq.core.options import parent_ids
from django_delayq.core.workflows import Signature
from django_delayq.exceptions import InvalidJob
from django_delayq.models import Job


@dataclass(frozen=True, slots=True)
class GroupResult:
    """What ``group()`` returns: the members' ids, in order, and the ``then`` job."""

    ids: list[str]
    then: JobHandle | None


def _checked(pieces: Iterable[Any], what: str) -> list[Signature]:
    out = list(pieces)
    for piece in out:
        if not isinstance(piece, Signature):
            raise InvalidJob("%s takes job(fn).s(*args, **kwargs) signatures; got %r"
                             % (what, piece))
    return out


def schedule_signature(sig: Signature, after: Sequence[str] = ()) -> JobHandle:
    """Schedule ``sig``, waiting for ``after`` on top of its call's own ``after``."""
    call: JobCall = sig.call
    if after:
        call = replace(call, after=[*after, *parent_ids(call.after)])
    return call.schedule(*sig.args, **sig.kwargs)


def chain(*pieces: Signature) -> list[JobHandle]:
    """Schedule ``pieces`` so that each one runs after the one before it succeeded; a
    piece that fails cancels the rest (its ``after_failure="run"`` runs it anyway).
    Returns their handles, in order."""
    sigs = _checked(pieces, "chain()")
    if not sigs:
        raise InvalidJob("chain() needs at least one signature")
    handles: list[JobHandle] = []
    with transaction.atomic(using=router.db_for_write(Job)):
        for sig in sigs:
            handles.append(schedule_signature(sig, [handles[-1].id] if handles else ()))
    return handles


def group(pieces: Iterable[Signature], *, then: Signature | None = None) -> GroupResult:
    """Schedule every piece (they run in parallel) and, with ``then``, a job that runs
    once all of them succeeded. Runs of pieces with the same call go through
    ``schedule_many`` (bulk inserts): 10,000 pieces are one call per 1,000."""
    sigs = _checked(pieces, "group()")
    if then is not None:
        _checked([then], "group(then=...)")
    ids: list[str] = []
    with transaction.atomic(using=router.db_for_write(Job)):
        for call, run in groupby(sigs, key=lambda sig: sig.call):
            batch = list(run)
            if len(batch) == 1 or call.key is not None:
                ids.extend(schedule_signature(sig).id for sig in batch)
            else:
                ids.extend(call.schedule_many([JobSpec(args=sig.args, kwargs=sig.kwargs)
                                               for sig in batch]))
        last = None if then is None else schedule_signature(then, ids)
    return GroupResult(ids=ids, then=last)
