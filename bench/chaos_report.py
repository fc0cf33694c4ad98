"""The chaos run's figures (``bench/chaos.py``): per scenario, from the runs the jobs
stamped into a file (``jobs_chaos.stamped_runs``), the audit rows and the harness's own
record of its kills and its wipe; then a summary table of every scenario."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

from chaos_infra import Event, Run
from chaos_scenarios import Scenario

TICK_ALLOWANCE = 5.0  # seconds without a tick allowed beyond a scenario's own outage


def converge(ids: list[str], timeout: float) -> float:
    """Wait (up to ``timeout``) until every row of ``ids`` is final; seconds waited."""
    from django_delayq.models import UNFINISHED_STATUSES, Job

    wanted, started = set(ids), time.time()
    while time.time() - started < timeout:
        live = set(Job.objects.filter(status__in=UNFINISHED_STATUSES)
                   .exclude(key__startswith="delayq.tick:").values_list("id", flat=True))
        if not live & wanted:
            break
        time.sleep(0.5)
    return time.time() - started


def _chunks(ids: list[str], n: int = 500) -> list[list[str]]:
    return [ids[i:i + n] for i in range(0, len(ids), n)]


def _rows(ids: list[str]) -> tuple[dict[str, dict[str, Any]], set[tuple[str, int]],
                                   dict[str, list[float]]]:
    from django_delayq.models import Job, JobAttempt
    from django_delayq.worker.recovery import LOST_LEASE

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


def tick_figures(ticks: list[dict[str, Any]], w0: float, w1: float) -> tuple[int, int]:
    """(distinct ticks due in [w0, w1) that ran, seconds of that window without one)."""
    dues = [t["due"] for t in ticks]
    if not dues:
        return 0, max(0, int(w1 - w0))
    anchor = dues[0] - math.floor(dues[0])
    ran = {round(d - anchor) for d in dues if w0 <= d < w1}
    grid = range(math.ceil(w0 - anchor), math.ceil(w1 - anchor))
    return len(ran & set(grid)), sum(1 for k in grid if k not in ran)


def analyse(run: Run, sc: Scenario, runs: list[dict[str, Any]], w0: float,
            w1: float) -> dict[str, Any]:
    events = [e for e in run.events if sc.t0 <= e.at <= sc.t1]
    ticks = [r for r in runs if r["due"] is not None]
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
    ran, without = tick_figures(ticks, w0, w1)
    allowed = sc.outage + TICK_ALLOWANCE
    r = {"scheduled": len(sc.ids) + len(sc.special),
         "lost": len(lost) + sum(1 for j in sc.special if j not in rows),
         "twice": twice, "why": dict(why), "unexplained": len(unexplained),
         "overlaps": overlaps, "stuck": len(stuck), "otherwise": len(otherwise),
         "mismatch": len(set(below) | set(reused) | set(unrecorded)),
         "below": len(below), "reused": len(reused), "unrecorded": len(unrecorded),
         "around_wipe": len(around) if wipes else None,
         "ticks": ran, "no_tick_s": without, "allowed_s": allowed,
         "tick_gap": max(0, math.ceil(without - allowed)),
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
        ("tick gaps", "%d s (%d s without a tick; allowed %.0f s: outage + %g)" % (
            r["tick_gap"], r["no_tick_s"], r["allowed_s"], TICK_ALLOWANCE)),
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
