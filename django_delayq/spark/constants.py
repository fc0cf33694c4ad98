"""Names and numbers the report shares between Spark, charts, CSV and HTML."""

from __future__ import annotations

# every status of an audit row (``models.JobStatus``): ``jobs`` is the sum of these counts
STATUSES = ("waiting", "scheduled", "running", "retrying", "succeeded", "dead", "cancelled",
            "expired")
# final statuses (``models.FINAL_STATUSES``): finished jobs, for throughput and attempts
FINAL = ("succeeded", "dead", "cancelled", "expired")
# rows whose run_at is the due time of the attempt that started at started_at
LATENESS_STATUSES = ("running", "succeeded", "dead")
# rows whose finished_at ends the attempt that started at started_at (an expired job never
# ran: its started_at, if any, is that of an earlier attempt)
DURATION_STATUSES = ("succeeded", "dead", "cancelled")
# rows whose error_type is not an error of the job: an expiry is a status, not an exception
NOT_ERRORS = ("expired",)
# an error whose exception type was not recorded (exports made before error_type existed,
# a message that does not start with a dotted class path)
UNKNOWN_TYPE = "(type not recorded)"
PERCENTILES = (0.5, 0.95, 0.99)
PERCENTILE_NAMES = ("p50", "p95", "p99")
BUCKETS_SECONDS = (60, 300, 900, 3600, 6 * 3600, 86400)
MAX_POINTS = 1500
TOP_ERRORS = 5
