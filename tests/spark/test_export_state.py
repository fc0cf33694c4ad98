"""The export's state file holds only what delayq_export writes there: any other value (a
negative or fractional id, a text where a list or a number belongs, a time without a
zone or later than the run, a pending record that is not there) is refused with one
line naming the file, the key and the value, instead of making a run skip rows."""

from __future__ import annotations

import io
import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_delayq.spark.export import STATE_FILE, export_jobs
from django_delayq.spark.preflight import RECORDS_DIR
from tests.spark.data import BASE, known_jobs, save_jobs
from tests.spark.test_export_attempts import _fail, _jobs

pytestmark = pytest.mark.django_db

NOW = BASE + timedelta(days=2)
MARK = (NOW - timedelta(seconds=5)).isoformat()


def _exported(root: Path) -> dict[str, Any]:
    save_jobs(known_jobs())
    _fail(_jobs(91, 95))
    export_jobs(root, now=NOW, progress=False)
    return dict(json.loads((root / STATE_FILE).read_text()))


def _refused(root: Path, message: str) -> None:
    """Both ways in refuse it with one line naming the state file, and nothing is written."""
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    with pytest.raises(ValueError) as raised:
        export_jobs(root, now=NOW + timedelta(minutes=1), progress=False)
    with pytest.raises(CommandError) as command:
        call_command("delayq_export", "--out", str(root), "--settle", "0", verbosity=0,
                     stdout=io.StringIO())
    for text in (str(raised.value), str(command.value)):
        assert "\n" not in text and text.startswith(str(root / STATE_FILE)), text
        assert re.search(message, text), text
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


@pytest.mark.parametrize("key, value, message", [
    ("high_water", "yesterday", r'high_water is "yesterday", not an ISO datetime with a '
                                r"time zone"),
    ("high_water", "2025-03-02T00:00:00", r'high_water is "2025-03-02T00:00:00", not an ISO '
                                          r"datetime with a time zone"),
    ("high_water", "2999-01-01T00:00:00+00:00", r"high_water is 2999-01-01T00:00:00\+00:00, "
                                                r"later than this run's time"),
    ("runs", "3", r'runs is "3", not an integer >= 0'),
    ("last_run_rows", -1, r"last_run_rows is -1, not an integer >= 0"),
    ("exclude", "kwargs", r'exclude is "kwargs", not a list of column names'),
    ("pending", "../../victim.parquet", r'pending is "../../victim.parquet", not the name of '
                                        r"a record"),
    ("attempts", [], r"attempts is \[\], not an object"),
    ("attempts", {"floor": -5}, r"attempts.floor is -5, not an attempt id"),
    ("attempts", {"floor": 3.5}, r"attempts.floor is 3.5, not an attempt id"),
    ("attempts", {"floor": "999999"}, r'attempts.floor is "999999", not an attempt id'),
    ("attempts", {"floor": True}, r"attempts.floor is true, not an attempt id"),
    ("attempts", {"floor": 0, "marks": [["soon", 10]]},
     r'attempts.marks\[0\]\[0\] is "soon", not an ISO datetime'),
    ("attempts", {"floor": 0, "marks": [[MARK, "10"]]},
     r'attempts.marks\[0\]\[1\] is "10", not an attempt id'),
    ("attempts", {"floor": 0, "marks": [[MARK, -10]]},
     r"attempts.marks\[0\]\[1\] is -10, not an attempt id"),
    ("attempts", {"floor": 0, "marks": 7}, r"attempts.marks is 7, not a list"),
    ("attempts", {"floor": 0, "before": "2999-01-01T00:00:00+00:00"},
     r"attempts.before is 2999-01-01T00:00:00\+00:00, later than this run's time"),
    ("attempts", {"floor": 10**9}, r"attempts.floor is 1000000000, above the highest attempt "
                                   r"id this database has handed out \(\d+\): a run would "
                                   r"skip every attempt row up to it"),
    ("attempts", {"floor": 0, "marks": [[MARK, 1], [MARK, 10**9]]},
     r"attempts.marks\[1\]\[1\] is 1000000000, above the highest attempt id"),
    ("version", 99, r"version is 99, not a version delayq_export writes \(1, 2, 3\)"),
    ("version", True, r"version is true, not a version delayq_export writes"),
    ("version", None, r"version is null, not a version delayq_export writes"),
])
def test_a_value_delayq_export_never_writes_is_refused(tmp_path: Path, key: str, value: Any,
                                                       message: str) -> None:
    state = _exported(tmp_path)
    (tmp_path / STATE_FILE).write_text(json.dumps({**state, key: value}))
    _refused(tmp_path, message)


def test_a_state_that_is_no_json_object_is_refused(tmp_path: Path) -> None:
    _exported(tmp_path)
    (tmp_path / STATE_FILE).write_text("[1, 2]")
    _refused(tmp_path, r"not a JSON object")
    (tmp_path / STATE_FILE).write_text("{not json")
    _refused(tmp_path, r"not JSON \(")


def test_a_missing_pending_record_is_refused_and_a_full_export_goes_on(tmp_path: Path) -> None:
    """Without the record of live, due rows, a row a late write changed would never be
    exported again: refused, and ``--full`` (which reads every row) is the way on."""
    state = _exported(tmp_path)
    (tmp_path / state["pending"]).unlink()
    _refused(tmp_path, r"names the record %s, which is not in %s: .* run a full export"
             % (state["pending"], tmp_path))
    result = export_jobs(tmp_path, now=NOW + timedelta(minutes=1), full=True, progress=False)
    assert (result.rows, result.attempt_rows) == (111, 5)
    assert (tmp_path / json.loads((tmp_path / STATE_FILE).read_text())["pending"]).is_file()
    assert len(list((tmp_path / RECORDS_DIR).iterdir())) == 2


def test_the_states_earlier_versions_wrote_are_still_read(tmp_path: Path) -> None:
    """No ``database``, ``attempts``, ``overlap_seconds`` or ``pending`` (version 1 and 2):
    nothing there to refuse."""
    state = _exported(tmp_path)
    old = {k: state[k] for k in ("high_water", "since", "until", "runs", "last_run_rows",
                                 "exclude", "redact")}
    (tmp_path / STATE_FILE).write_text(json.dumps({**old, "version": 1}))
    assert export_jobs(tmp_path, now=NOW + timedelta(minutes=1), progress=False).rows == 0
    assert json.loads((tmp_path / STATE_FILE).read_text())["runs"] == 2


def test_attempt_ids_are_bounded_by_what_the_database_handed_out(tmp_path: Path) -> None:
    """The bound is the highest id ever handed out, not the highest id left in the table:
    after the newest attempt rows were deleted (pruned), the marks a run wrote before are
    still accepted, and attempt rows inserted since are exported."""
    from django_delayq.models import JobAttempt
    from django_delayq.spark import export_attempts

    state = _exported(tmp_path)
    top = max(JobAttempt.objects.values_list("id", flat=True))
    assert export_attempts.highest_issued() == top == state["attempts"]["marks"][-1][1]
    JobAttempt.objects.filter(id=top).delete()
    assert export_attempts.highest_issued() == top
    later = NOW + timedelta(minutes=5)
    result = export_jobs(tmp_path, now=later, progress=False)  # the mark names the deleted id
    assert result.attempt_rows is not None
    _fail(_jobs(96, 97))
    assert export_jobs(tmp_path, now=later + timedelta(minutes=5), progress=False) \
        .attempt_rows == 2
