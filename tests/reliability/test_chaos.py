"""The chaos run in small: bench/chaos.py with 1,000 jobs over 20 s (select: -m chaos).

The real thing, as a subprocess: its own redis-server (AOF), its own SQLite database,
4 worker processes SIGKILLed every ~2 s, one Redis restart, one FLUSHALL. Passes when
no job is lost, every row ends succeeded with an execution behind it, and duplicates
are all explained by a kill or the wipe (the script's exit code).
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
        [sys.executable, str(ROOT / "bench" / "chaos.py"), "--jobs", "1000", "--seconds", "20",
         "--workers", "4", "--converge-timeout", "75"],
        cwd=ROOT, capture_output=True, text=True, timeout=240)
    figures = dict(line.rsplit(None, 1) for line in proc.stdout.splitlines()
                   if line.startswith(("jobs scheduled", "jobs lost")))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "RESULT: PASS" in proc.stdout
    assert figures == {"jobs scheduled": "1000", "jobs lost": "0"}
