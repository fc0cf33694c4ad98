"""An export directory as a version from before attempt rows were exported left it: job
files and a state without ``attempts``, no attempt files, no marker, and no record of the
files written (records came later still)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def as_an_earlier_version_left_it(root: Path) -> None:
    from django_delayq.spark.export import STATE_FILE
    from django_delayq.spark.preflight import ATTEMPTS_DIR, ATTEMPTS_MARKER, RECORDS_DIR

    state = json.loads((root / STATE_FILE).read_text())
    for key in ("attempts", "last_run_attempt_rows", "database"):
        state.pop(key, None)
    (root / STATE_FILE).write_text(json.dumps({**state, "version": 2}))
    (root / ATTEMPTS_MARKER).unlink(missing_ok=True)
    shutil.rmtree(root / ATTEMPTS_DIR, ignore_errors=True)
    shutil.rmtree(root / RECORDS_DIR, ignore_errors=True)
