"""The chaos run in small (select: -m chaos): bench/chaos.py's scenarios 3, 4 and 5 with
120 jobs each and a 2.5 s lease, about 35 s.

The real thing, as a subprocess: its own redis-server (AOF), its own SQLite database, real
workers; the database locked for two leases + 2 s (``BEGIN EXCLUSIVE``), Redis SIGSTOPped
for the lease + 3 s, a worker SIGKILLed three times and restarted under the same
``--worker-id``, and a 1-second periodic schedule throughout. Passes when, in each
scenario, no job is lost, none completed twice without a kill of the process that ran
it, no two runs of a job overlapped, no row is stuck or ended otherwise, attempts match
the runs, and the schedule ticked (the script's exit code and its summary).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.chaos
def test_chaos_run_small() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "chaos.py"), "--scenarios", "3,4,5",
         "--jobs-each", "120", "--spread", "6", "--lease", "2.5", "--converge-timeout", "40"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    table = {line[:30].strip(): line[30:].split() for line in out.split("== summary")[-1]
             .splitlines() if line[:30].strip()}
    assert table["jobs scheduled"] == ["120"] * 3
    for row in ("lost", "overlapping runs", "rows stuck non-final", "rows ended otherwise",
                "attempt mismatches", "tick gaps (s)"):
        assert table[row] == ["0"] * 3, (row, out[-4000:])
    assert table["RESULT"] == ["PASS"] * 3
    assert all(int(n) > 0 for n in table["ticks run"]), out[-4000:]
