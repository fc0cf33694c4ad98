"""Queue limits (claim.lua: claims per window, jobs in flight), callable limits
(acquire.lua, release_callable.lua) and give_back.lua (defer), on the Redis clock given as ``now_ms``.
Every Redis target, the cluster included."""

from __future__ import annotations

import random

from django_delayq.engine import Engine, Grant, LimitState, NewJob, QueueLimit
from django_delayq.engine.controls import GRANT_MARGIN_MS, MOST_WAIT_MS, SPREAD_MS

NOW = 1_800_000_000_000
LEASE = 30_000


def fill(engine: Engine, n: int, queue: str = "q") -> None:
    engine.enqueue(queue, [NewJob(id="j%03d" % i, at_ms=NOW - 1000 + i) for i in range(n)],
                   now_ms=NOW)


# -- queue limits -------------------------------------------------------------------------


def test_queue_limit_is_stored_read_back_and_lifted(engine: Engine) -> None:
    assert engine.queue_limit("q") is None
    engine.set_queue_limit("q", rate=(5, 1000), concurrency=3)
    assert engine.queue_limit("q") == QueueLimit(rate=(5, 1000), concurrency=3)
    engine.set_queue_limit("q", rate=None, concurrency=2)
    assert engine.queue_limit("q") == QueueLimit(rate=None, concurrency=2)
    engine.set_queue_limit("q", rate=None, concurrency=None)
    assert engine.queue_limit("q") is None


def test_queue_rate_limit_grants_n_claims_per_window(engine: Engine) -> None:
    fill(engine, 10)
    engine.set_queue_limit("q", rate=(3, 1000), concurrency=None)
    first = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert len(first.jobs) == 3
    assert (first.limited, first.blocked_until_ms, first.next_due_ms) == (
        True, NOW + 1000, NOW + 1000)
    held = engine.claim("q", 10, LEASE, now_ms=NOW + 999)
    assert (held.jobs, held.blocked_until_ms) == ([], NOW + 1000)
    assert len(engine.claim("q", 2, LEASE, now_ms=NOW + 1000).jobs) == 2
    third = engine.claim("q", 10, LEASE, now_ms=NOW + 1500)
    assert len(third.jobs) == 1 and third.blocked_until_ms == NOW + 2000
    assert [j.id for j in first.jobs] == ["j000", "j001", "j002"]  # order kept


def test_no_window_of_the_queue_holds_more_than_n_claims(engine: Engine) -> None:
    fill(engine, 300)
    engine.set_queue_limit("q", rate=(7, 500), concurrency=None)
    rng = random.Random(5)
    claims: list[int] = []
    now = NOW
    while len(claims) < 150:
        now += rng.randint(0, 120)
        claims += [now] * len(engine.claim("q", rng.randint(1, 5), LEASE, now_ms=now).jobs)
    for i, start in enumerate(claims):
        assert sum(1 for t in claims[i:] if t < start + 500) <= 7, start


def test_queue_concurrency_limit_counts_jobs_in_flight(engine: Engine) -> None:
    fill(engine, 5)
    engine.set_queue_limit("q", rate=None, concurrency=2)
    first = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert len(first.jobs) == 2
    assert (first.limited, first.blocked_until_ms, first.next_due_ms) == (True, None, None)
    assert engine.claim("q", 10, LEASE, now_ms=NOW).jobs == []
    assert engine.ack("q", [(first.jobs[0].id, first.jobs[0].token)]) == [True]
    assert [j.id for j in engine.claim("q", 10, LEASE, now_ms=NOW).jobs] == ["j002"]


def test_a_dead_workers_leases_hold_the_concurrency_until_recovered(engine: Engine) -> None:
    fill(engine, 2)
    engine.set_queue_limit("q", rate=None, concurrency=1)
    [first] = engine.claim("q", 5, 10, now_ms=NOW).jobs  # its worker dies
    assert engine.claim("q", 5, LEASE, now_ms=NOW + 20).jobs == []
    assert [r.id for r in engine.recover("q", now_ms=NOW + 20)] == [first.id]
    [second] = engine.claim("q", 5, LEASE, now_ms=NOW + 20).jobs  # due before the retry
    assert engine.ack("q", [(second.id, second.token)]) == [True]
    again = engine.claim("q", 5, LEASE, now_ms=NOW + 20).jobs
    assert [(j.id, j.token) for j in again] == [(first.id, 2)]


def test_a_limit_that_holds_nothing_back_is_not_reported(engine: Engine) -> None:
    fill(engine, 2)
    engine.set_queue_limit("q", rate=(5, 1000), concurrency=5)
    result = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert (len(result.jobs), result.limited, result.blocked_until_ms) == (2, False, None)


# -- defer --------------------------------------------------------------------------------


def test_defer_puts_a_job_back_for_later_with_its_attempt_given_back(engine: Engine) -> None:
    k = engine.keys("q")
    fill(engine, 2)
    a, b = engine.claim("q", 2, LEASE, now_ms=NOW).jobs
    assert engine.defer("q", [(a.id, a.token, NOW + 700), (b.id, b.token + 1, NOW + 700)],
                        now_ms=NOW) == [True, False]  # a stale token is refused
    assert engine.client.zscore(k.pending, a.id) == NOW + 700
    assert engine.inspect("q", a.id).attempts == 0
    assert engine.inspect("q", b.id).place == "inflight"
    assert engine.claim("q", 5, LEASE, now_ms=NOW + 699).jobs == []
    [again] = engine.claim("q", 5, LEASE, now_ms=NOW + 700).jobs
    assert (again.id, again.attempt, again.due_ms) == (a.id, 1, NOW + 700)
    assert again.token == 2  # a token of its own: a.token's holder deferred it


def test_a_deferred_job_gives_its_claim_back_to_the_queue_and_group_rates(
        engine: Engine) -> None:
    """A job a callable limit refused never started: given back with its claim's server
    time, its claim leaves the queue's rate window and its group's, so the refusal costs
    the other jobs of the queue nothing."""
    engine.set_queue_limit("q", rate=(3, 60_000), concurrency=None,
                           groups=QueueLimit(rate=(2, 60_000)))
    engine.enqueue("q", [NewJob(id="j%d" % i, at_ms=NOW - 100 + i, group="g")
                         for i in range(6)], now_ms=NOW)
    a, b = engine.claim("q", 2, LEASE, now_ms=NOW).jobs
    assert a.claimed_ms == NOW and engine.claim("q", 5, LEASE, now_ms=NOW + 1).jobs == []
    assert engine.defer("q", [(a.id, a.token, NOW + 10, a.claimed_ms)], now_ms=NOW + 2) == [
        True]
    assert engine.client.zcard(engine.keys("q").starts) == 1  # b's claim only
    [c] = engine.claim("q", 5, LEASE, now_ms=NOW + 10).jobs  # the group's second claim
    # given back without its claim's time (-1): the claim stays counted, as before
    assert engine.defer("q", [(c.id, c.token, NOW + 20)], now_ms=NOW + 11) == [True]
    assert engine.claim("q", 5, LEASE, now_ms=NOW + 20).jobs == []  # the group's 2 used
    assert engine.client.zcard(engine.keys("q").starts) == 2


def test_a_job_handed_back_unstarted_by_a_busy_worker_gives_its_claim_back(
        engine: Engine) -> None:
    """A worker busy with slow jobs hands back the jobs it will not start soon
    (``Claiming.trim``: ``release(unclaim=True)``): their claims leave the rate windows,
    as another worker claims them; a drain's release keeps them counted, as before."""
    engine.set_queue_limit("q", rate=(3, 60_000), concurrency=None,
                           groups=QueueLimit(rate=(2, 60_000)))
    engine.enqueue("q", [NewJob(id="j%d" % i, at_ms=NOW - 100 + i, group="g")
                         for i in range(6)], now_ms=NOW)
    a, b = engine.claim("q", 2, LEASE, now_ms=NOW).jobs
    assert engine.release("q", [a], now_ms=NOW + 1, unclaim=True) == [True]
    assert engine.client.zcard(engine.keys("q").starts) == 1  # b's claim only
    [again] = engine.claim("q", 5, LEASE, now_ms=NOW + 2).jobs  # the group's second claim
    assert again.id == a.id
    assert engine.release("q", [again], now_ms=NOW + 3) == [True]  # a drain's: counted
    assert engine.claim("q", 5, LEASE, now_ms=NOW + 4).jobs == []  # the group's 2 used
    assert engine.client.zcard(engine.keys("q").starts) == 2


# -- callable limits ----------------------------------------------------------------------


def acquire(engine: Engine, job: str, now: int, rate: tuple[int, int] | None = (2, 1000),
            concurrency: int | None = None, lease_ms: int = 60_000) -> Grant:
    return engine.acquire("shop.tasks.call_api", job, lease_ms=lease_ms, rate=rate,
                          concurrency=concurrency, now_ms=now)


def test_callable_rate_grants_n_per_window_plus_margin(engine: Engine) -> None:
    assert acquire(engine, "a", NOW).granted
    assert acquire(engine, "b", NOW + 10).granted
    refused = acquire(engine, "c", NOW + 20)
    assert refused == Grant(granted=False, retry_at_ms=NOW + 1000 + GRANT_MARGIN_MS)
    assert not acquire(engine, "c", NOW + 1000 + GRANT_MARGIN_MS - 1).granted
    assert acquire(engine, "c", NOW + 1000 + GRANT_MARGIN_MS).granted


def test_no_window_of_a_callable_limit_holds_more_than_n_grants(engine: Engine) -> None:
    rng = random.Random(11)
    grants: list[int] = []
    now = NOW
    for i in range(400):
        now += rng.randint(0, 40)
        if acquire(engine, "j%d" % i, now, rate=(5, 300)).granted:
            grants.append(now)
    assert len(grants) > 20
    for i, start in enumerate(grants):
        assert sum(1 for t in grants[i:] if t < start + 300 + GRANT_MARGIN_MS) <= 5


def test_refused_jobs_get_spread_retry_times(engine: Engine) -> None:
    rate = (10, 1000)
    for i in range(10):
        assert acquire(engine, "ok%d" % i, NOW, rate=rate).granted
    retries = [acquire(engine, "r%03d" % i, NOW + 1, rate=rate).retry_at_ms or 0
               for i in range(200)]
    assert retries == sorted(retries) and len(set(retries)) == 200
    gaps = {b - a for a, b in zip(retries, retries[1:])}
    assert gaps == {-(-(1000 + GRANT_MARGIN_MS) // 10)}  # ~105 ms apart
    assert retries[0] == NOW + 1000 + GRANT_MARGIN_MS


def test_callable_concurrency_slots_are_released_or_expire(engine: Engine) -> None:
    path = "shop.tasks.call_api"
    assert acquire(engine, "a", NOW, rate=None, concurrency=2, lease_ms=5000).granted
    assert acquire(engine, "b", NOW, rate=None, concurrency=2, lease_ms=5000).granted
    refused = [acquire(engine, "c%d" % i, NOW + 1, rate=None, concurrency=2) for i in range(3)]
    assert [g.granted for g in refused] == [False] * 3
    # the k-th refusal since the last grant waits SPREAD_MS * 2^(k-1): 50, 100, 200 ms
    assert [g.retry_at_ms for g in refused] == [NOW + 1 + SPREAD_MS * i for i in (1, 2, 4)]
    assert acquire(engine, "a", NOW + 2, rate=None, concurrency=2, lease_ms=5000).granted
    assert engine.release_callable(path, ["a", "zzz"]) == 1
    assert acquire(engine, "c0", NOW + 3, rate=None, concurrency=2, lease_ms=5000).granted
    # b's worker died: its slot comes back when its lease ends
    assert not acquire(engine, "d", NOW + 4999, rate=None, concurrency=2).granted
    assert acquire(engine, "d", NOW + 5000, rate=None, concurrency=2).granted


def test_a_job_waiting_for_a_slot_backs_off_instead_of_asking_in_a_loop(
        engine: Engine) -> None:
    """Refused for concurrency while a long call holds the slot, a job comes back after
    50, 100, 200 ... ms, then every MOST_WAIT_MS: not every SPREAD_MS. A grant starts the
    back-off over."""
    assert acquire(engine, "long", NOW, rate=None, concurrency=1).granted
    now, waits = NOW + 1, []
    while now < NOW + 20_000:  # the waiting job asks again at each retry time
        grant = acquire(engine, "w", now, rate=None, concurrency=1)
        assert not grant.granted and grant.retry_at_ms is not None
        waits.append(grant.retry_at_ms - now)
        now = grant.retry_at_ms
    assert waits[:6] == [SPREAD_MS * 2 ** k for k in range(5)] + [MOST_WAIT_MS]
    assert set(waits[5:]) == {MOST_WAIT_MS} and len(waits) <= 25  # not 400 asks in 20 s
    assert engine.release_callable("shop.tasks.call_api", ["long"]) == 1
    assert acquire(engine, "w", now, rate=None, concurrency=1).granted
    refused = acquire(engine, "x", now + 1, rate=None, concurrency=1)
    assert refused.retry_at_ms is not None and refused.retry_at_ms - (now + 1) <= SPREAD_MS * 2


def test_limit_state_counts_the_window_and_the_slots(engine: Engine) -> None:
    path = "shop.tasks.call_api"
    now = engine.time_ms()
    for job in ("a", "b"):
        assert engine.acquire(path, job, lease_ms=60_000, rate=(5, 60_000),
                              concurrency=3).granted
    assert engine.limit_state(path, rate=(5, 60_000), concurrency=3) == LimitState(
        started_in_window=2, running=2)
    engine.release_callable(path, ["a"])
    state = engine.limit_state(path, rate=(5, 60_000), concurrency=3)
    assert (state.started_in_window, state.running) == (2, 1)
    assert engine.limit_state("other", rate=None, concurrency=None) == LimitState(
        started_in_window=0, running=0)
    assert now <= engine.time_ms()


# -- values planted in Redis by another writer -----------------------------------------------


def test_a_fractional_queue_limit_planted_in_redis_does_not_stop_claims(engine: Engine) -> None:
    fill(engine, 5)
    engine.client.hset(engine.keys("q").limit, mapping={"rate": "2.5", "per_ms": "1000.5",
                                                         "concurrency": "3.5"})
    claimed = engine.claim("q", 10, LEASE, now_ms=NOW)
    assert len(claimed.jobs) == 2  # whole numbers: 2 per window, 3 in flight
    assert len(engine.claim("q", 10, LEASE, now_ms=NOW + 1001).jobs) == 1


def test_a_next_free_slot_planted_far_away_does_not_park_the_callable(engine: Engine) -> None:
    path = "shop.tasks.call_api"
    assert acquire(engine, "a", NOW, rate=None, concurrency=1, lease_ms=5000).granted
    for planted in ("1e15", "inf", "nan", "junk"):
        engine.client.set(engine.callable_keys(path).next_free, planted)
        refused = acquire(engine, "b", NOW + 1, rate=None, concurrency=1)
        assert not refused.granted
        assert NOW < (refused.retry_at_ms or 0) <= NOW + 86_400_000, planted
