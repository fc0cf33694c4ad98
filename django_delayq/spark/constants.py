"""Names and numbers the report shares between Spark, charts, CSV and HTML."""

from __future__ import annotations

STATUSES = ("scheduled", "running", "retrying", "succeeded", "dead", "cancelled")
FINAL = ("succeeded", "dead", "cancelled")
# rows whose run_at is the due time of the attempt that started at started_at
LATENESS_STATUSES = ("running", "succeeded", "dead")
PERCENTILES = (0.5, 0.95, 0.99)
PERCENTILE_NAMES = ("p50", "p95", "p99")
BUCKETS_SECONDS = (60, 300, 900, 3600, 6 * 3600, 86400)
MAX_POINTS = 1500
TOP_ERRORS = 5
