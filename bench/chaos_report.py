"""The chaos run's figures (``bench/chaos.py``): per scenario, from the runs the jobs
stamped into a file (``jobs_chaos.stamped_runs``), the audit rows and the harness's own
record of its kills and its wipe; then a summary table of every scenario."""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from chaos_infra import Event, Run, note
from chaos_scenarios import Scenario

TICK_ALLOWANCE = 5.0  # seconds without a tick allowed beyond a scenario's own outage
RECOVERY_S = 2.0  # from a lease's end until a live worker has taken the job back and run it


class Registered:
    """Notes, every 0.2 s, the first time each worker process appears in the workers
    registry (its first heartbeat: it is up, about to claim). A worker SIGKILLed before
    that never ran anything; on a loaded machine a start takes seconds."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.first: dict[int, float] = {}  # pid -> first seen in the registry
        self.ids: dict[int, str] = {}  # pid -> its worker id
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="chaos-registry", daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        import json

        from django_delayq.core.connection import get_engine

        while not self.stop.wait(0.2):
            try:
                infos = [(w.id, json.loads(w.info or "{}")) for w in get_engine().workers()]
            except Exception:  # noqa: BLE001 - Redis stopped or restarting: look again
                continue
            now = time.time()
            for worker_id, info in infos:
                pid = info.get("pid")
                if isinstance(pid, int) and pid not in self.first:
                    self.first[pid], self.ids[pid] = now, worker_id
                    note(self.run, "worker %d registered as %s" % (pid, worker_id))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def nobody_up(missing: list[float], run: Run, first: dict[int, float]) -> list[float]:
    """The seconds without a tick at which no worker was up (registered, not yet dead):
    nothing could create or run a tick then."""
    ends = {e.pid: e.at for e in run.events if e.kind == "kill"}
    spans = [(t, ends.get(pid, run.last_seen.get(pid, math.inf))) for pid, t in first.items()]
    return [due for due in missing if not any(a <= due < b for a, b in spans)]


def lease_seconds() -> float:
    from django_delayq.core.conf import get_settings

    return get_settings().lease_seconds


def converge(ids: list[str], timeout: float) -> float:
    """Wait (up to ``timeout``) until every row of ``ids`` is final; seconds waited."""
    from django_delayq.models import UNFINISHED_STATUSES, Job

    wanted, started = set(ids), time.time()
    while time.time() - started < timeout:
        live = set(Job.objects.filter(status__in=UNFINISHED_STATUSES)
                   .values_list("id", flat=True))
        if not live & wanted:
            break
        time.sleep(0.5)
    return time.time() - started


def _chunks(ids: list[str], n: int = 500) -> list[list[str]]:
    return [ids[i:i + n] for i in range(0, len(ids), n)]


def _rows(ids: list[str]) -> tuple[dict[str, dict[str, Any]], set[tuple[str, int]],
                                   dict[str, list[float]]]:
    from django_delayq.models import Job, JobAttempt
    from django_delayq.worker.outcome import LOST_LEASE

    rows: dict[str, dict[str, Any]] = {}
    numbers: set[tuple[str, int]] = set()
    recoveries: dict[str, list[float]] = defaultdict(list)
    for part in _chunks(ids):
        for r in Job.objects.filter(pk__in=part).values("id", "status", "attempts",
                                                        "worker_id"):
            rows[r["id"]] = dict(r)
        for job_id, number, error, at in JobAttempt.objects.filter(job_id__in=part) \
                .values_list("job_id", "number", "error", "finished_at"):
            numbers.add((job_id, number))
            if error == LOST_LEASE:
                recoveries[job_id].append(at.timestamp())
    return rows, numbers, recoveries


def _explained(job_id: str, a: dict[str, Any], b: dict[str, Any], events: list[Event],
               recoveries: list[float]) -> str | None:
    """Why completed run ``b`` followed completed run ``a`` of the same job: the harness
    SIGKILLed ``a``'s process after ``a`` started and before ``b`` did (``a``'s outcome
    died with it), or wiped Redis in between (or with the job in flight), and no lease was
    taken back from a live worker between ``a``'s start and that event. None: unexplained."""
    for e in events:
        if e.kind == "kill" and e.pid != a["pid"]:
            continue
        if (e.kind == "wipe" and job_id in e.inflight) or a["start"] <= e.at <= b["start"]:
            if not any(a["start"] < t < e.at for t in recoveries):
                return e.kind
    return None


def _death(r: dict[str, Any], run: Run, events: list[Event]) -> float:
    """When a run that never completed stopped: its process's SIGKILL, else the last time
    the harness saw that process alive."""
    kills = [e.at for e in events if e.kind == "kill" and e.pid == r["pid"]
             and e.at >= r["start"]]
    return min(kills) if kills else run.last_seen.get(r["pid"], r["start"]) + 0.1


def tick_figures(ticks: list[dict[str, Any]], w0: float, w1: float) -> tuple[int, list[float]]:
    """(distinct ticks due in [w0, w1) that ran, the due times of the window's ticks that
    did not)."""
    dues = [t["due"] for t in ticks]
    if not dues:
        return 0, [w0 + k for k in range(max(0, int(w1 - w0)))]
    anchor = dues[0] - math.floor(dues[0])
    ran = {round(d - anchor) for d in dues if w0 <= d < w1}
    grid = range(math.ceil(w0 - anchor), math.ceil(w1 - anchor))
    return len(ran & set(grid)), [k + anchor for k in grid if k not in ran]


@dataclass
class Held:
    """A tick job a SIGKILLed worker held: the schedule waited on it from its tick until
    it ran again, at most until the dead worker's lease ended."""

    job: str
    pid: int
    tick: float
    until: float


def tick_times() -> dict[str, float]:
    """Tick job id -> its tick (the key's; a job put back after a loss is due later)."""
    from django_delayq.core.periodic import tick_of_key
    from django_delayq.models import TICK_KEY_PREFIX, Job

    rows = Job.objects.filter(key__startswith=TICK_KEY_PREFIX).values_list("id", "key")
    return {job: tick.timestamp() for job, key in rows if (tick := tick_of_key(key))}


def held_ticks(events: list[Event], runs: list[dict[str, Any]], ticks: dict[str, float],
               lease: float, up: dict[int, float]) -> list[Held]:
    """The tick jobs in flight when the harness SIGKILLed a worker (its snapshot of the
    queue's leases) that did not run again within half a lease of the kill: a live holder
    runs a tick at once, a dead one's lease must expire (by design) before a live worker
    takes it back. The first such kill of a worker that was up (``up``: pid -> its first
    heartbeat; one still starting claims nothing) names the holder."""
    held: dict[str, Held] = {}
    kills = [e for e in events if e.kind == "kill" and up.get(e.pid, math.inf) < e.at]
    for e in sorted(kills, key=lambda e: e.at):
        for job in sorted((e.inflight & ticks.keys()) - held.keys()):
            again = min((r["start"] for r in runs if r["job"] == job and r["start"] > e.at),
                        default=math.inf)
            if again >= e.at + lease / 2:
                held[job] = Held(job, e.pid, ticks[job], min(again, e.at + lease + RECOVERY_S))
    return list(held.values())


def explain_gaps(missing: list[float], held: list[Held],
                 outages: list[tuple[float, float]]) -> dict[int, int]:
    """Seconds without a tick that a held tick explains, by the dead holder's pid: from
    its tick to a second after it ran again (or its lease ended). A second within an
    outage is not explained: the scenario's allowance counts it already."""
    why: dict[int, int] = defaultdict(int)
    for due in missing:
        if any(a <= due <= b for a, b in outages):
            continue
        h = next((h for h in held if h.tick - 0.5 < due <= h.until + 1.0), None)
        if h is not None:
            why[h.pid] += 1
    return dict(why)


def analyse(run: Run, sc: Scenario, runs: list[dict[str, Any]], w0: float,
            w1: float, registered: Registered) -> dict[str, Any]:
    events = [e for e in run.events if sc.t0 <= e.at <= sc.t1]
    tick_at = tick_times()
    ticks = [{**r, "due": tick_at.get(r["job"], r["due"])} for r in runs if r["due"] is not None]
    window = [t for t in ticks if w0 <= t["due"] < w1]
    scope = set(sc.ids) | set(sc.special) | {t["job"] for t in window}
    by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        if r["job"] in scope:
            by_job[r["job"]].append(r)
    rows, numbers, recoveries = _rows(sorted(scope))
    old_ticks = {t["job"] for t in window if t["start"] < sc.t1 - 5}
    live = ("scheduled", "running", "retrying", "waiting")
    stuck = [j for j in set(sc.ids) | set(sc.special) | old_ticks
             if rows.get(j, {}).get("status") in live]
    lost = [j for j in sc.ids if j not in rows or not any(r["end"] for r in by_job[j])]
    expected = {**{j: "succeeded" for j in list(sc.ids) + list(old_ticks)}, **sc.special}
    otherwise = [j for j, want in expected.items() if j in rows
                 and rows[j]["status"] not in live and rows[j]["status"] != want]
    twice, unexplained, overlaps = 0, [], 0
    why: dict[str, int] = defaultdict(int)
    below, reused, unrecorded = [], [], []
    for j, rs in by_job.items():
        done = [r for r in rs if r["end"] is not None]
        if len(done) > 1:
            twice += 1
            reasons = [_explained(j, a, b, events, recoveries.get(j, []))
                       for a, b in zip(done, done[1:])]
            known = [k for k in reasons if k is not None]
            if len(known) < len(reasons):
                unexplained.append(j)
            else:
                why[known[0]] += 1
        spans = sorted((r["start"], r["end"] if r["end"] is not None
                        else _death(r, run, events)) for r in rs)
        reach = -math.inf
        for start, end in spans:
            overlaps += start < reach
            reach = max(reach, end)
        if j in rows and rows[j]["attempts"] < len(rs):
            below.append(j)
        if len({r["attempt"] for r in rs}) < len(rs):
            reused.append(j)
        if any(r["end"] is None and (j, r["attempt"]) not in numbers for r in rs):
            unrecorded.append(j)
    wipes = [e.at for e in events if e.kind == "wipe"]
    around = [j for j in set(below) | set(reused) | set(unrecorded)
              if any(min(r["start"] for r in by_job[j]) < w < max(r["start"] for r in by_job[j])
                     for w in wipes)]
    ran, missing = tick_figures(ticks, w0, w1)
    idle = [m for m in nobody_up(missing, run, registered.first)
            if not any(a <= m <= b for a, b in sc.outages)]  # the allowance counts those
    held = explain_gaps([m for m in missing if m not in idle],
                        held_ticks(events, runs, tick_at, lease_seconds(), registered.first),
                        sc.outages)
    allowed = sc.outage + TICK_ALLOWANCE
    workers = {**{r["pid"]: r["worker"] for r in runs}, **registered.ids}
    r = {"scheduled": len(sc.ids) + len(sc.special),
         "lost": len(lost) + sum(1 for j in sc.special if j not in rows),
         "twice": twice, "why": dict(why), "unexplained": len(unexplained),
         "overlaps": overlaps, "stuck": len(stuck), "otherwise": len(otherwise),
         "mismatch": len(set(below) | set(reused) | set(unrecorded)),
         "below": len(below), "reused": len(reused), "unrecorded": len(unrecorded),
         "around_wipe": len(around) if wipes else None,
         "ticks": ran, "no_tick_s": len(missing), "allowed_s": allowed,
         "held": {"%d (%s)" % (pid, workers.get(pid, "id unknown")): n
                  for pid, n in held.items()},
         "idle": len(idle),
         "tick_gap": max(0, math.ceil(len(missing) - len(idle) - sum(held.values())
                                      - allowed)),
         "samples": {"lost": lost[:3], "unexplained": unexplained[:3], "stuck": stuck[:3],
                     "otherwise": otherwise[:3], "mismatch": (below + reused + unrecorded)[:3]}}
    r["ok"] = sc.ok and not any(r[k] for k in ("lost", "unexplained", "overlaps", "stuck",
                                               "otherwise", "mismatch", "tick_gap"))
    return r


def block(sc: Scenario, r: dict[str, Any]) -> None:
    print("\n== %d. %s (%s)" % (sc.number, sc.title, sc.key))
    why = ", ".join("%d after a %s" % (n, k) for k, n in sorted(r["why"].items())) or "none"
    lines: list[tuple[str, object]] = [
        ("jobs scheduled", r["scheduled"]),
        ("jobs lost", r["lost"]),
        ("jobs completed twice", "%d (%s; %d unexplained)" % (r["twice"], why,
                                                             r["unexplained"])),
        ("runs of one job overlapping in time", r["overlaps"]),
        ("rows stuck non-final", r["stuck"]),
        ("rows ended otherwise than expected", r["otherwise"]),
        ("attempt mismatches", "%d (attempts below runs %d, a token run twice %d, a failed "
                               "run without its JobAttempt %d)" % (
                                   r["mismatch"], r["below"], r["reused"], r["unrecorded"])
                               + ("" if r["around_wipe"] is None else
                                  "; %d of these jobs ran before and after the wipe"
                                  % r["around_wipe"])),
        ("ticks of the 1 s schedule run", r["ticks"]),
        ("tick gaps", "%d s (%d s without a tick, %d of them explained; allowed %.0f s: "
                      "outage + %g)" % (r["tick_gap"], r["no_tick_s"],
                                        r["idle"] + sum(r["held"].values()), r["allowed_s"],
                                        TICK_ALLOWANCE)),
        *[("... explained: tick held by killed worker", "pid %s: %d s (waited for its lease)"
           % (who, n)) for who, n in r["held"].items()],
        *([("... explained: no worker up", "%d s (each one killed or still starting)"
            % r["idle"])] if r["idle"] else []),
        *sc.figures,
        ("converged after the faults in", "%.1f s" % sc.converge_s),
        ("scenario wall time", "%.1f s" % (sc.t1 - sc.t0)),
    ]
    for name, value in lines:
        print("%-45s %s" % (name, value))
    for what, ids in r["samples"].items():
        if ids:
            print("  e.g. %s: %s" % (what, " ".join(ids)))
    print("RESULT:", "PASS" if r["ok"] else "FAIL")


def summary(done: list[tuple[Scenario, dict[str, Any]]]) -> None:
    print("\n== summary")
    rows: list[tuple[str, Any]] = [
        ("jobs scheduled", lambda r: r["scheduled"]),
        ("lost", lambda r: r["lost"]),
        ("completed twice (unexplained)", lambda r: "%d (%d)" % (r["twice"], r["unexplained"])),
        ("overlapping runs", lambda r: r["overlaps"]),
        ("rows stuck non-final", lambda r: r["stuck"]),
        ("rows ended otherwise", lambda r: r["otherwise"]),
        ("attempt mismatches", lambda r: r["mismatch"]),
        ("ticks run", lambda r: r["ticks"]),
        ("tick gaps (s)", lambda r: r["tick_gap"]),
    ]
    print("%-30s" % "" + "".join("%14s" % ("%d %s" % (sc.number, sc.key))[:13]
                                  for sc, _ in done))
    for name, get in rows:
        print("%-30s" % name + "".join("%14s" % get(r) for _, r in done))
    print("%-30s" % "outage (s)" + "".join("%14.1f" % sc.outage for sc, _ in done))
    print("%-30s" % "converged in (s)" + "".join("%14.1f" % sc.converge_s for sc, _ in done))
    print("%-30s" % "RESULT" + "".join("%14s" % ("PASS" if r["ok"] else "FAIL")
                                       for _, r in done))
