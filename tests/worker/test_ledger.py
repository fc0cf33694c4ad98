"""The worker's ledger: its transitions keep every held job in exactly one state."""

from __future__ import annotations

import dataclasses
import math
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from django_delayq.engine import ClaimedJob
from django_delayq.engine.envelope import Envelope
from django_delayq.engine.outcomes import lease_clock
from django_delayq.worker import runner
from django_delayq.worker.ledger import Ledger, delivery, key_of
from django_delayq.worker.processes.children import Child
from django_delayq.worker.tracking import Link


def job(job_id: str, queue: str = "q", token: int = 1) -> ClaimedJob:
    return ClaimedJob(queue=queue, id=job_id, due_ms=0, token=token, envelope="",
                      attempt=token)


def failed(claimed: ClaimedJob, started_at: datetime | None = None) -> runner.Outcome:
    return runner.crashed(claimed, RuntimeError("boom"), started_at)


def test_a_job_goes_from_claimed_to_done_and_is_taken_once() -> None:
    ledger, a, b = Ledger(), job("a"), job("b")
    ledger.claimed([a, b])
    assert (ledger.capacity_used(), ledger.idle()) == (2, False)
    assert ledger.start(a) and ledger.start(b)
    assert not ledger.start(a)  # a job starts once
    assert len(ledger.running_jobs()) == 2 and {j.id for j in ledger.held()} == {"a", "b"}
    ledger.finish(key_of(a), failed(a))
    ledger.finish(key_of(b), failed(b))
    taken = ledger.take_done()
    assert [o.job.id for o in taken] == ["a", "b"]
    assert not ledger.idle()  # being settled: still held
    ledger.keep_unsettled([], taken)  # the round settled both
    assert ledger.take_done() == [] and ledger.idle() and ledger.held() == []


def test_released_jobs_do_not_start() -> None:
    ledger, a = Ledger(), job("a")
    ledger.claimed([a])
    assert ledger.release_unstarted() == [a]
    assert not ledger.start(a)
    assert ledger.idle() and ledger.capacity_used() == 0


def test_a_trim_keeps_the_jobs_next_to_start_and_releases_the_rest() -> None:
    """``release_unstarted(keep)`` (``Claiming.trim``, a stale pace): the ``keep`` jobs a
    thread takes next (priority, then claim order) stay held, the others are released."""
    ledger = Ledger()
    low, a, vip, b = (dataclasses.replace(job(i), payload=Envelope(path="x.y", priority=p))
                      for i, p in (("low", -5), ("a", 0), ("vip", 10), ("b", 0)))
    ledger.claimed([low, a, vip, b])
    assert ledger.release_unstarted(keep=2) == [b, low]
    assert {j.id for j in ledger.unstarted()} == {"vip", "a"} and ledger.waiting() == 2
    assert not ledger.start(low) and ledger.start(vip)
    assert ledger.release_unstarted(keep=5) == [] and ledger.waiting() == 1


def test_the_pace_and_its_age_come_from_the_jobs_that_ended() -> None:
    ledger, a = Ledger(), job("a")
    assert ledger.pace is None and ledger.ended_at == 0.0
    ledger.claimed([a])
    assert ledger.start(a)
    before = time.monotonic()
    ledger.finish(key_of(a), failed(a))
    assert ledger.pace is not None and before <= ledger.ended_at <= time.monotonic()


def test_a_reread_ends_only_the_copies_still_held() -> None:
    """The cancels of held jobs are read again (``reread``) while the ledger moves on: a
    copy redelivered meanwhile (a newer token) and a drain's hand-back are not ended by
    the answer about the copy the query was sent for."""
    ledger, a, b, c = Ledger(), job("a"), job("b"), job("c")
    ledger.claimed([a, b, c], read_at=1.0)
    sent = ledger.unstarted()  # what the query reads
    newer = job("b", token=2)
    ledger.claimed([newer], read_at=5.0)  # b redelivered while the query ran
    assert ledger.reread(sent, 3.0, {"a", "b"}, failed) == [a]
    assert [o.job for o in ledger.take_done()] == [a]
    assert ledger.unstarted() == [newer, c]
    assert (ledger.read_at(newer), ledger.read_at(c)) == (5.0, 3.0)  # never older
    assert ledger.reread([c], 2.0, set(), failed) == [] and ledger.read_at(c) == 3.0
    sent = ledger.unstarted()
    assert ledger.release_unstarted() == [newer, c]  # a drain hands them back meanwhile
    assert ledger.reread(sent, 4.0, {"b", "c"}, failed) == []
    assert ledger.take_done() == [] and ledger.read_at(c) is None
    assert not ledger.start(c)  # nothing to start: handed back


def test_a_timed_out_attempt_is_done_at_once_and_its_late_outcome_dropped() -> None:
    late: list[runner.Outcome] = []
    ledger, a = Ledger(on_late=late.append), job("a")
    ledger.claimed([a])
    before = datetime.now(UTC)
    assert ledger.start(a, limit_s=5.0)
    seen: list[tuple[datetime, float]] = []

    def outcome_of(claimed: ClaimedJob, started_at: datetime, limit: float) -> runner.Outcome:
        seen.append((started_at, limit))
        return failed(claimed, started_at)

    started = ledger.running_jobs()[0].started_mono
    assert ledger.next_limit() == started + 5.0
    assert ledger.time_out_limits(started + 4.9, outcome_of) == []  # within its limit
    assert ledger.time_out_limits(started + 5.0, outcome_of) == [a]
    assert ledger.held() == [a]  # its failure waits to be settled: its lease is kept
    assert ledger.capacity_used() == 1  # its thread is still busy
    [timed_out] = ledger.take_done()
    assert timed_out.job is a and (timed_out.started_at, 5.0) == seen[0]
    assert before <= seen[0][0] <= datetime.now(UTC)  # when its thread started it
    ledger.finish(key_of(a), returned := failed(a))  # what it returns later is dropped
    assert late == [returned]  # after on_late saw it (its callable-limit slot)
    ledger.keep_unsettled([], [timed_out])  # the round settled its failure
    assert ledger.take_done() == [] and ledger.capacity_used() == 0 and ledger.idle()


def test_unsettled_outcomes_come_back_first_and_keep_the_ledger_busy() -> None:
    ledger, a, b = Ledger(), job("a", "down"), job("b")
    ledger.claimed([], [failed(a)])  # ended without running (an unusable row)
    assert ledger.done_count()
    kept = ledger.take_done()
    ledger.keep_unsettled(kept, kept)  # its queue is backing off
    assert not ledger.idle() and ledger.unsettled_queues() == {"down"}
    ledger.claimed([b])
    assert ledger.start(b)
    ledger.finish(key_of(b), failed(b))
    taken = ledger.take_done()
    assert [o.job.id for o in taken] == ["a", "b"]
    assert not ledger.idle() and {j.id for j in ledger.held()} == {"a", "b"}  # settling
    ledger.keep_unsettled([], taken)  # both settled
    assert ledger.unsettled_queues() == set() and ledger.idle() and ledger.held() == []


def test_a_redelivered_copy_replaces_the_stale_one_no_thread_took() -> None:
    ledger, stale, fresh = Ledger(), job("a"), job("a", token=2)
    ledger.claimed([stale])
    ledger.claimed([fresh])  # its lease was lost; the job came back under a newer token
    assert ledger.held() == [fresh] and ledger.capacity_used() == 1
    assert not ledger.start(stale)  # the thread that takes the stale copy: nothing to run
    assert ledger.start(fresh)  # the redelivered copy runs, once
    assert not ledger.start(fresh)
    ledger.finish(key_of(fresh), failed(fresh))
    ledger.keep_unsettled([], ledger.take_done())
    assert ledger.idle() and ledger.capacity_used() == 0


def test_a_stale_copy_that_runs_keeps_its_slot_until_it_ends() -> None:
    ledger, stale, fresh = Ledger(), job("a"), job("a", token=2)
    ledger.claimed([stale])
    assert ledger.start(stale)
    ledger.claimed([fresh])
    assert ledger.start(fresh)  # both run: the stale copy's function cannot be stopped
    assert ledger.capacity_used() == 2 and len(ledger.running_jobs()) == 2
    ledger.finish(key_of(stale), failed(stale))  # its slot is freed, not the other's
    assert ledger.capacity_used() == 1 and [r.job for r in ledger.running_jobs()] == [fresh]
    ledger.finish(key_of(fresh), failed(fresh))
    taken = ledger.take_done()  # both outcomes are settled (the stale one's is refused)
    assert [o.job.token for o in taken] == [1, 2]
    ledger.keep_unsettled([], taken)
    assert ledger.idle() and ledger.capacity_used() == 0


def test_a_lost_lease_drops_the_unstarted_copy_only() -> None:
    ledger, a, b, c = Ledger(), job("a"), job("b"), job("c")
    ledger.claimed([a, b, c])
    assert ledger.start(b)
    ledger.claimed([fresh := job("c", token=2)])
    assert ledger.lost([a, b, c]) == [a]  # b runs on; c's copy here is already newer
    assert not ledger.start(a)
    assert ledger.capacity_used() == 2 and set(ledger.held()) == {b, fresh}


def test_a_supervisor_keeps_its_record_of_the_redelivered_copy() -> None:
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    ledger = Ledger(link=Link(ours.detach()))
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    child = Child(slot=0, proc=proc, sock=theirs)  # type: ignore[arg-type]
    stale, fresh = job("a"), job("a", token=2)
    ledger.claimed([stale])
    assert ledger.start(stale)
    ledger.claimed([fresh])
    assert ledger.start(fresh)
    ledger.finish(key_of(stale), failed(stale))  # the stale copy ends and is settled
    ledger.keep_unsettled([], ledger.take_done())
    assert ledger.link is not None
    ledger.link.flush()
    child.read_all()
    key = key_of(fresh)
    assert child.held[key] == fresh and child.running[key].job.token == 2
    assert key not in child.ended  # the stale copy's end and settlement: its own entries
    ledger.finish(key, failed(fresh))
    ledger.keep_unsettled([], ledger.take_done())
    ledger.link.flush()
    child.read_all()
    assert not child.held and not child.running and not child.ended
    ledger.link.orphaned.set()  # its threads end
    ledger.link.sock.close()
    theirs.close()


def test_a_supervisor_that_missed_a_claim_records_the_attempt_not_the_token() -> None:
    """A start whose claim report the supervisor did not see (the copy it holds is older)
    is tracked from the start report: with its attempt number, never its token (a token
    may come from the Redis clock)."""
    ours, theirs = socket.socketpair()
    ledger = Ledger(link=Link(ours.detach()))
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    child = Child(slot=0, proc=proc, sock=theirs)  # type: ignore[arg-type]
    copy = ClaimedJob(queue="q", id="a", due_ms=0, token=1_800_000_000_001, envelope="",
                      attempt=2)
    ledger.claimed([copy])
    assert ledger.start(copy)
    assert ledger.link is not None
    ledger.link.flush()
    got = b""
    while got.count(b"\n") < 2:
        got += theirs.recv(65536)
    for line in got.split(b"\n"):
        if line and not line.startswith(b"c\t"):  # the claim report lost
            child._apply(line)
    run = child.running[key_of(copy)]
    assert (run.job.token, run.job.attempt) == (copy.token, 2)
    ledger.link.orphaned.set()  # its threads end
    ledger.link.sock.close()
    theirs.close()


def test_a_lease_is_known_from_its_claim_then_from_each_heartbeat() -> None:
    """``lease_left``: the claim's lease until a heartbeat extends it; an extend refused
    leaves none; a delivery whose extend failed keeps what was known; a beat forgets the
    deliveries it no longer holds."""
    now = lease_clock()
    ledger = Ledger()
    a = dataclasses.replace(job("a"), lease_until=now - 1)  # claimed, then a stall
    b, c = job("b"), job("c", queue="other")
    assert ledger.lease_left(a) < 0 and ledger.lease_left(b) == math.inf  # not known
    ledger.extended({delivery(a): now + 10, delivery(b): -math.inf, delivery(c): now + 5})
    assert 9 < ledger.lease_left(a) <= 10 and ledger.lease_left(b) == -math.inf
    ledger.extended({delivery(a): now + 20}, kept={delivery(c)})  # c's node unreachable
    assert 19 < ledger.lease_left(a) <= 20 and 4 < ledger.lease_left(c) <= 5
    assert ledger.lease_left(b) == math.inf  # no longer held: forgotten
    ledger.extended({})
    assert ledger.lease_left(a) < 0 and ledger.lease_left(c) == math.inf  # the claim's


def test_the_leases_known_are_replaced_whole() -> None:
    """``lease_left`` reads without the lock: ``extended`` assigns the new leases built
    whole, never a dict it fills afterwards."""
    assigned: list[dict] = []

    class Watched(Ledger):
        def __setattr__(self, name: str, value: object) -> None:
            if name == "_until":
                assigned.append(dict(value))  # type: ignore[call-overload]
            super().__setattr__(name, value)

    ledger = Watched()
    a, c = job("a"), job("c", queue="other")
    ledger.extended({delivery(c): 5.0})
    ledger.extended({delivery(a): 10.0}, kept={delivery(c)})
    assert assigned[-2:] == [{delivery(c): 5.0}, {delivery(c): 5.0, delivery(a): 10.0}]


@pytest.mark.skipif(not hasattr(time, "CLOCK_BOOTTIME"), reason="no CLOCK_BOOTTIME here")
def test_leases_are_timed_on_the_clock_that_counts_a_suspend() -> None:
    """Where there is CLOCK_BOOTTIME (Linux), leases are timed on it: it counts on while
    the system is suspended, as the server's lease does; the monotonic clock does not."""
    before = time.clock_gettime(time.CLOCK_BOOTTIME)
    now = lease_clock()
    assert before <= now <= time.clock_gettime(time.CLOCK_BOOTTIME)
