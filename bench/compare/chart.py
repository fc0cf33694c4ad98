#!/usr/bin/env python
"""Draw docs/img/performance.png from run.py's results JSON (runs in .venv-peers).

    python bench/compare/chart.py results.json docs/img/performance.png
"""

from __future__ import annotations

import json
import sys
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = [
    ("enqueue_one_jobs_per_s", "enqueue, one at a time (jobs/s, higher is better)", False),
    ("enqueue_bulk_jobs_per_s", "enqueue, bulk API (jobs/s, higher is better)", False),
    ("drain_jobs_per_s", "drain, 1 worker process (jobs/s, higher is better)", False),
    ("lateness_p99_ms", "lateness p99 (ms, log scale, lower is better)", True),
    ("memory_bytes_per_job", "Redis bytes per pending job (lower is better)", False),
]


def draw(results: dict[str, Any], out: str) -> None:
    systems = [name for name, r in results["systems"].items() if "error" not in r or len(r) > 2]
    fig, grid = plt.subplots(2, 3, figsize=(13, 7.5))
    axes = list(grid.flat)
    for ax, (key, title, log) in zip(axes, PANELS):
        values = [results["systems"][s].get(key) for s in systems]
        colors = ["#2a7ab9" if s == "delayq" else "#9aa5b1" for s in systems]
        bars = ax.bar(systems, [v or 0 for v in values], color=colors)
        for bar, v in zip(bars, values):
            label = "n/a" if v is None else ("%.3g" % v if v < 100 else f"{v:,.0f}")
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        if log:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    _latency_panel(axes[-1], results.get("script_latency") or {})
    fig.suptitle(results.get("title", "django-delayq vs peers"), fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def _latency_panel(ax: Any, lat: dict[str, Any]) -> None:
    ax.axis("off")
    lines = ["django-delayq scripts (Redis-side, slowest call)"]
    for size in lat.get("sizes", []):
        lines.append("%s pending: %.2f ms (client max %.2f ms)"
                     % ("{:,}".format(size["pending"]), size["redis_max_script_ms"],
                        size["client_max_ms"]))
    drain = lat.get("drain")
    if drain:
        lines.append("%s due backlog: %s jobs/s," % ("{:,}".format(drain["backlog"]),
                                                    "{:,}".format(drain["jobs_per_s"])))
        lines.append("  PING p99 %.2f ms, max %.2f ms" % (drain["ping_p99_ms"],
                                                         drain["ping_max_ms"]))
    ax.text(0.0, 0.95, "\n".join(lines), va="top", fontsize=9, family="monospace")


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        draw(json.load(fh), sys.argv[2])
