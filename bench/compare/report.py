"""The one table ``run.py`` prints (also pasted into docs/performance.md)."""

from __future__ import annotations

from typing import Any

COLUMNS = [
    ("enqueue_one_jobs_per_s", "enqueue 1/s"),
    ("enqueue_bulk_jobs_per_s", "bulk/s"),
    ("drain_jobs_per_s", "drain/s"),
    ("lateness_p50_ms", "late p50 ms"),
    ("lateness_p99_ms", "p99"),
    ("lateness_max_ms", "max"),
    ("memory_bytes_per_job", "B/job"),
    ("kill_all_done_s", "kill→all run s"),
    ("kill_lost", "lost"),
    ("kill_duplicates", "twice"),
    ("worker_cpu_us_per_job", "worker CPU µs/job"),
    ("redis_us_per_job", "Redis µs/job"),
    ("redis_script_us_per_job", "of it Lua"),
]


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and value < 100:
        return "%.1f" % value
    return f"{value:,.0f}"


def _notes(name: str, r: dict[str, Any]) -> list[str]:
    notes = ["%s: %s %s" % (name, phase, why) for phase, why in r.get("errors", {}).items()]
    if r.get("drain_complete") is False:
        notes.append("%s: drain ran %s of %s jobs" % (name, r.get("drain_jobs"),
                                                     r.get("drain_expected")))
    if r.get("lateness_jobs", 0) < r.get("lateness_expected", 0):
        notes.append("%s: only %s of %s lateness jobs ran" % (name, r.get("lateness_jobs"),
                                                             r.get("lateness_expected")))
    if r.get("lateness_overran"):
        notes.append("%s: enqueueing the lateness jobs overran the first due time" % name)
    if r.get("kill_caught") is not None:
        notes.append("%s: SIGKILL after %s of %s jobs ran; %s lower-numbered jobs had not "
                     "run yet (re-run p50 %s ms, max %s ms after the kill)" % (
                         name, r.get("kill_ran_before"), r.get("kill_jobs"),
                         r.get("kill_caught"), r.get("kill_rerun_p50_ms"),
                         r.get("kill_rerun_max_ms")))
    if r.get("redis_slowest_ms"):
        notes.append("%s: slowest Redis command during the drain %s ms, %s commands per job"
                     % (name, r["redis_slowest_ms"], r.get("redis_commands_per_job")))
    for phase in ("drain", "lateness"):
        rows = r.get(phase + "_audit_rows_succeeded")
        if rows is not None:
            notes.append("%s: %s audit rows 'succeeded' after the %s phase" % (name, rows, phase))
    return notes


def table(results: dict[str, Any]) -> str:
    head = "| system | " + " | ".join(title for _, title in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    notes: list[str] = []
    for name, r in results["systems"].items():
        lines.append("| %s | " % name + " | ".join(_cell(r.get(k)) for k, _ in COLUMNS) + " |")
        notes += _notes(name, r)
    lines.append("")
    for name, r in results["systems"].items():
        if "settings" in r:
            lines.append("- %s — %s; one: %s; bulk: %s; worker: %s"
                         % (name, r["version"], r["one"], r["bulk"], r["settings"]))
    lines += [""] + ["  note: " + n for n in notes]
    lines += _latency(results.get("script_latency"))
    return "\n".join(lines)


def _latency(lat: dict[str, Any] | None) -> list[str]:
    if not lat or "error" in lat:
        return ["", "script latency: %s" % (lat or {}).get("error", "not run")]
    out = ["", "django-delayq script latency (Engine directly, every script, one call at a time):"]
    for s in lat["sizes"]:
        out.append("  %9s pending: client p99 %.2f ms, max %.2f ms; Redis-side slowest script "
                   "%.2f ms (%d calls over 1 ms)" % ("{:,}".format(s["pending"]),
                                                     s["client_p99_ms"], s["client_max_ms"],
                                                     s["redis_max_script_ms"],
                                                     s["redis_scripts_over_1ms"]))
    d = lat.get("drain")
    if d:
        out.append("  %s-job due backlog drained at %s jobs/s (claim %d + ack, one client); "
                   "slowest Redis command %.2f ms; concurrent PING p99 %.2f ms, max %.2f ms"
                   % ("{:,}".format(d["backlog"]), "{:,}".format(d["jobs_per_s"]),
                      d["claim_batch"], d["redis_max_command_ms"], d["ping_p99_ms"],
                      d["ping_max_ms"]))
    return out
