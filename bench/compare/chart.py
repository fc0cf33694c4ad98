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
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.8))
    for ax, (key, title, log) in zip(axes, PANELS):
        values = [results["systems"][s].get(key) for s in systems]
        colors = ["#2a7ab9" if s == "delayq" else "#9aa5b1" for s in systems]
        bars = ax.bar(systems, [v or 0 for v in values], color=colors)
        for bar, v in zip(bars, values):
            label = "n/a" if v is None else ("%.3g" % v if v < 100 else "{:,.0f}".format(v))
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        if log:
            ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.suptitle(results.get("title", "django-delayq vs peers"), fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        draw(json.load(fh), sys.argv[2])
