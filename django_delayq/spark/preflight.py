"""The report's paths, checked before Spark starts.

A session takes seconds to start and the computation minutes; an output directory this
process cannot create or write, or an input that is not there, must fail at once, with
the one line the report would have ended with. Nothing heavy is imported here (no
pyspark, no pyarrow), so ``delayq_report`` and ``spark-submit report.py`` check their
paths in a fraction of a second.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

JOBS_DIR = "jobs"
ATTEMPTS_DIR = "attempts"
# In an export or archive directory: "every job row here has its attempt rows here too"
# (``export_attempts``). Without it the report has no failed-attempt figure.
ATTEMPTS_MARKER = "_delayq_attempts_complete.json"
# In an export or archive directory: one record per run of what it wrote (``records``);
# the report reads the files listed there and no other.
RECORDS_DIR = "_delayq_files"


def is_url(path: Path | str) -> bool:
    """``s3a://``, ``hdfs://``...: Spark's to read, nothing to check here."""
    return "://" in str(path)


def jobs_dir(root: Path | str) -> Path:
    """The directory of exported job files under ``root`` (``root/jobs``, or ``root``
    itself when it is that directory); FileNotFoundError when there is none."""
    root = Path(root)
    path = root / JOBS_DIR if (root / JOBS_DIR).is_dir() else root
    if not path.is_dir():
        raise FileNotFoundError("no exported jobs at %s (run delayq_export --out %s)"
                                % (path, root))
    return path


def export_root(root: Path | str) -> Path:
    """The directory holding ``jobs/`` and ``attempts/``: ``root``, or its parent when
    ``root`` is the ``jobs`` directory itself."""
    root = Path(root)
    if root.name == JOBS_DIR and not (root / JOBS_DIR).is_dir():
        return root.parent
    return root


def writable_dir(out: Path | str, doing: str = "write the report to") -> Path:
    """Create ``out`` and prove it writable (a probe file, removed); ValueError saying
    why not (``cannot <doing> <out>: ...``)."""
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".delayq-probe.", dir=out)
        os.close(fd)
        Path(probe).unlink()
    except OSError as exc:
        raise ValueError("cannot %s %s: %s (give a directory this process can create "
                         "and write to)" % (doing, out, exc.strerror or exc)) from exc
    return out


def check_paths(out: Path | str, input: Path | str | None = None) -> None:
    """The input first (nothing is created when it is missing), then the output."""
    if input is not None and not is_url(input):
        jobs_dir(input)
    writable_dir(out)
