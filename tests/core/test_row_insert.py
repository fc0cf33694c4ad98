"""The prepared INSERT of ``schedule()`` (``core/row_insert.py``, through Django's cursor)
stores a row exactly as the ORM's ``Job.save()`` stores it, column by column, on every
database the tests run on, and so do ``schedule_many``'s rows written by ``insert_many``
(executemany, or COPY on PostgreSQL); its short cuts give what ``get_db_prep_save``
gives; query capture and execute wrappers see the INSERT."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_delayq import JobSpec, job, schedule, schedule_many
from django_delayq.core import ids, row_insert
from django_delayq.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

PARIS = timezone(timedelta(hours=1))


def _rows() -> list[Job]:
    now, whole = datetime.now(UTC), datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    common: dict[str, Any] = {"queue": "default", "callable_path": "tests.jobs.noop",
                              "max_attempts": 3, "created_at": now, "updated_at": now}
    return [
        Job(id=ids.new_id(), args=[1], kwargs={}, run_at=now, scheduled_for=now, **common),
        Job(id=ids.new_id(), args=["é", None, 2.5, [True]], kwargs={"a": {"b": "ü"}},
            key="k-1", run_at=datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=PARIS),
            scheduled_for=None, priority=-7, timeout=1.5, backoff=[1, 2.5],
            retry_on=["builtins.ValueError"], expires_at=now + timedelta(hours=1),
            requeued_from="x" * 26, task_backend="default", parents_left=2,
            cancel_requested=True, **common),
        # whole seconds (a text without a fraction) next to one microsecond past them
        Job(id=ids.new_id(), args=[], kwargs={}, run_at=whole, max_attempts=1,
            scheduled_for=whole + timedelta(microseconds=1), queue="default",
            callable_path="tests.jobs.noop", created_at=whole, updated_at=whole),
    ]


def _django(row: Job) -> list[Any]:
    return [f.get_db_prep_save(getattr(row, f.attname), connection)
            for f in Job._meta.local_concrete_fields]


def _plain(value: Any) -> Any:
    return ("json", value.obj) if hasattr(value, "obj") else value  # psycopg's Jsonb


def _values_of(row: Job) -> dict[str, Any]:
    return {f.attname: getattr(row, f.attname) for f in Job._meta.local_concrete_fields}


def test_every_column_is_prepared_as_get_db_prep_save_prepares_it() -> None:
    for row in _rows():
        assert [_plain(v) for v in row_insert.values_params(_values_of(row), "default")] == [
            _plain(v) for v in _django(row)]


def test_values_give_the_params_of_the_row_they_make() -> None:
    for row in _rows():
        values = {f.attname: getattr(row, f.attname) for f in Job._meta.local_concrete_fields
                  if f.attname not in ("status", "attempts", "result", "group", "atomic")}
        made = row_insert.new_row(**values)
        assert [_plain(v) for v in row_insert.values_params(values, "default")] == [
            _plain(v) for v in _django(made)]


def test_values_in_another_order_or_with_fewer_names_give_the_same_params() -> None:
    # each set of names has its own plan (core/row_insert.py): none leaks into another
    for row in _rows():
        values = _values_of(row)
        expected = [_plain(v) for v in _django(row)]
        backwards = dict(reversed(list(values.items())))
        assert [_plain(v) for v in row_insert.values_params(backwards, "default")] == expected
        fewer = {name: value for name, value in values.items() if value is not None}
        made = row_insert.new_row(**fewer)
        assert [_plain(v) for v in row_insert.values_params(fewer, "default")] == [
            _plain(v) for v in _django(made)]


def test_insert_values_stores_the_row_save_stores_with_receivers_or_without() -> None:
    # with a post_init receiver insert_values builds the Job and inserts its values
    from django.db.models.signals import post_init

    now = datetime.now(UTC)
    values: dict[str, Any] = {"queue": "default", "callable_path": "tests.jobs.noop",
                              "args": [1, "é"], "run_at": now, "scheduled_for": now,
                              "created_at": now, "updated_at": now, "max_attempts": 2}
    first, second = ids.new_id(), ids.new_id()
    row_insert.insert_values({"id": first, **values}, "default")

    def listener(sender: Any, instance: Any, **kwargs: Any) -> None:
        pass

    post_init.connect(listener, sender=Job)
    try:
        row_insert.insert_values({"id": second, **values}, "default")
    finally:
        post_init.disconnect(listener, sender=Job)
    assert _stored(first) == _stored(second)


def test_insert_values_sends_post_init_when_it_has_receivers_and_no_save_signal() -> None:
    from django.db.models.signals import post_init, post_save, pre_save

    seen: list[Any] = []
    saved: list[Any] = []

    def listener(sender: Any, instance: Any, **kwargs: Any) -> None:
        seen.append(instance.id)
        instance.last_error = "set by a post_init receiver"  # kept, as save() would keep it

    def on_save(sender: Any, instance: Any, **kwargs: Any) -> None:
        saved.append(instance.id)

    post_init.connect(listener, sender=Job)
    pre_save.connect(on_save, sender=Job)
    post_save.connect(on_save, sender=Job)
    try:
        handle = schedule("tests.jobs.noop", 1, delay=60)
    finally:
        post_init.disconnect(listener, sender=Job)
        pre_save.disconnect(on_save, sender=Job)
        post_save.disconnect(on_save, sender=Job)
    assert handle.id in seen
    assert saved == []  # schedule() sends its own signal, never the ORM's save signals
    assert Job.objects.values_list("last_error", flat=True).get(pk=handle.id) == (
        "set by a post_init receiver")
    with pytest.raises(TypeError):  # a name that is no column's, as Job(...) says
        row_insert.insert_values({"id": ids.new_id(), "nonsense": 1}, "default")


def _stored(pk: str) -> dict[str, Any]:
    """The row as the database holds it, by column, read with a plain cursor."""
    names = [f.column for f in Job._meta.local_concrete_fields if f.column != "id"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s FROM %s WHERE id = %%s" % (
            ", ".join(connection.ops.quote_name(n) for n in names),
            connection.ops.quote_name(Job._meta.db_table)), [pk])
        return dict(zip(names, cursor.fetchone(), strict=True))


def test_the_stored_row_equals_the_one_save_stores_column_by_column() -> None:
    for row in _rows():
        twin = Job(**_values_of(row))
        twin.id = ids.new_id()
        row_insert.insert_values(_values_of(row), "default")
        twin.save(force_insert=True)
        ours, orm = _stored(row.id), _stored(twin.id)
        assert ours.keys() == orm.keys()
        for column, value in ours.items():
            assert (column, value) == (column, orm[column])


def test_a_scheduled_row_equals_the_one_save_stores_column_by_column(
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    handle = schedule("tests.jobs.noop", "é", [1.5, None], delay=60, priority=3, timeout=2,
                      retry_on=[ValueError], expires=timedelta(hours=2), group="g",
                      extra={"k": True})
    row = Job.objects.get(pk=handle.id)
    twin = Job(**{f.attname: getattr(row, f.attname) for f in Job._meta.local_concrete_fields})
    twin.id = ids.new_id()
    twin.save(force_insert=True)
    ours, orm = _stored(row.id), _stored(twin.id)
    for column, value in ours.items():
        assert (column, value) == (column, orm[column])


def test_query_capture_and_execute_wrappers_see_the_insert() -> None:
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with CaptureQueriesContext(connection) as captured:
        schedule("tests.jobs.noop", 1, delay=60)
    with connection.execute_wrapper(wrapper):
        handle = job("tests.jobs.noop").schedule(2)
    assert any(q["sql"].startswith("INSERT INTO") for q in captured.captured_queries)
    assert [sql for sql in seen if sql.startswith("INSERT INTO")]
    assert Job.objects.get(pk=handle.id).args == [2]


def _fields(row: Job) -> dict[str, Any]:
    return {f.attname: getattr(row, f.attname) for f in Job._meta.concrete_fields}


def test_new_row_holds_what_job_init_gives() -> None:
    now = datetime.now(UTC)
    values: dict[str, Any] = {"id": ids.new_id(), "queue": "default", "args": [1],
                              "run_at": now, "callable_path": "tests.jobs.noop", "max_attempts": 2}
    fast, slow = row_insert.new_row(**values), Job(**values)
    created = (fast.created_at, slow.created_at)  # timezone.now() each: set them equal
    fast.created_at = fast.updated_at = slow.created_at = slow.updated_at = now
    assert _fields(fast) == _fields(slow) and all(created)
    assert fast._state.adding and fast._state.db is None
    fast.kwargs["x"] = 1  # a default of its own, not shared
    assert row_insert.new_row(**values).kwargs == {}
    with pytest.raises(TypeError):  # a name that is no field's, as Job(...) says
        row_insert.new_row(**values, nonsense=1)


def test_new_row_sends_post_init_as_job_init_does() -> None:
    from django.db.models.signals import post_init

    seen: list[Any] = []

    def listener(sender: Any, instance: Any, **kwargs: Any) -> None:
        seen.append(instance)

    post_init.connect(listener, sender=Job)
    try:
        row = row_insert.new_row(id=ids.new_id(), queue="default")
    finally:
        post_init.disconnect(listener, sender=Job)
    assert seen == [row]


def _values(**more: Any) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"id": ids.new_id(), "queue": "default", "callable_path": "tests.jobs.noop",
            "args": [1, "é"], "kwargs": {}, "run_at": now, "scheduled_for": now,
            "created_at": now, "updated_at": now, "max_attempts": 3, **more}


@pytest.mark.parametrize("more", [
    {},  # schedule() with no option: every other column a default, written as a literal
    {"kwargs": None},  # left out: its default, {}, written as the literal '{}'
    {"args": [], "kwargs": {"a": [1, {"b": None}]}},
    {"key": "k-2", "backoff": [1, 2], "priority": -3, "timeout": 2.5, "atomic": True,
     "group": "g", "requeued_from": "r" * 26, "task_backend": "tasks"},
    {"priority": 100, "retry_on": ["builtins.ValueError"], "group": "it's 100%"},
])
def test_insert_values_stores_the_row_the_orm_stores_with_the_same_values(
        more: dict[str, Any]) -> None:
    # insert_values' statement of these names (its constant columns as SQL literals)
    # against Job(**values).save(): the ORM fills the columns left out with its defaults
    values = {name: value for name, value in _values(**more).items() if value is not None}
    row_insert.insert_values(values, "default")
    twin = Job(**{**values, "id": ids.new_id()})
    twin.save(force_insert=True)
    ours, orm = _stored(values["id"]), _stored(twin.id)
    for column, value in ours.items():
        assert (column, value) == (column, orm[column])


def test_a_constant_is_a_literal_only_when_plain() -> None:
    from django_delayq.models import JobStatus

    assert [row_insert._literal(v) for v in (None, True, False, 0, -7, "", "scheduled",
                                             JobStatus.SCHEDULED)] == [
        "NULL", "TRUE", "FALSE", "0", "-7", "''", "'scheduled'", "'scheduled'"]
    for value in ("it's", "100%", "a b", "é", 1.5, [], b"x"):  # stays a parameter
        assert row_insert._literal(value) is None


def test_a_plan_binds_what_is_not_a_literal_in_column_order() -> None:
    values = _values(priority=4)
    plan, out = row_insert._fill(values, "default", connection)
    assert plan.sql.count("%s") == len(plan.bound(out))
    assert list(plan.bound(out)) == [v for v, mark in zip(
        out, plan.sql.split("VALUES (", 1)[1].rstrip(")").split(", "), strict=True)
        if mark == "%s"]


def _many_specs(keyed: bool) -> list[JobSpec]:
    """Jobs covering every kind of column ``schedule_many`` writes: options left at their
    defaults and given (explicit defaults too), JSON kwargs, unicode args (no NUL), aware
    datetimes in UTC and another zone, whole seconds; ``keyed``: each with a key, one
    given twice (the key's first spec stands)."""
    whole = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    specs = [
        JobSpec(args=[1]),
        JobSpec(args=["é", "日本語 ✓", "\u2028", -0.5, [True, None]],
                kwargs={"a": {"b": "ü"}, "n": None}, priority=-7, timeout=1.5,
                retry_on=[ValueError], expires=timedelta(hours=1), group="g-ü",
                atomic=True, delay=30),
        JobSpec(args=[], at=datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=PARIS),
                priority=100, timeout=timedelta(seconds=2), retry_on=[],
                expires=datetime(2031, 5, 7, tzinfo=PARIS), group="it's 100%"),
        JobSpec(args=["x"], at=whole, priority=0, atomic=False, retry_on="builtins.KeyError",
                expires=whole + timedelta(microseconds=1)),
    ]
    specs += [JobSpec(args=[i, "ß" * i], kwargs={"i": i} if i % 2 else {}, delay=i,
                      priority=i - 5, group="g%d" % (i % 3) if i % 3 else None)
              for i in range(8)]
    if keyed:
        specs = [replace(spec, key="k-%d-é" % i) for i, spec in enumerate(specs)]
        specs.append(replace(specs[1], args=["a later spec of the same key"]))
    return specs


def _read(pks: set[str]) -> dict[str, dict[str, Any]]:
    """These rows as the database holds them, by id then column (every column, the id
    too), read with a plain cursor."""
    names = [f.column for f in Job._meta.local_concrete_fields]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s FROM %s WHERE id IN (%s)" % (
            ", ".join(connection.ops.quote_name(n) for n in names),
            connection.ops.quote_name(Job._meta.db_table), ", ".join(["%s"] * len(pks))),
            sorted(pks))
        return {row[0]: dict(zip(names, row, strict=True)) for row in cursor.fetchall()}


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_insert_many_stores_the_rows_the_orm_stores(
        keyed: bool, monkeypatch: pytest.MonkeyPatch,
        delayq_settings) -> None:  # type: ignore[no-untyped-def]
    """``schedule_many``'s rows, written by ``row_insert.insert_many``, against the same
    values saved one by one with ``Job(**values).save()``, every column compared (the id
    and the created time too: each write runs in a transaction rolled back, so the ORM's
    rows take the same ids; the created time is in the values). The path taken:

    - unkeyed, on PostgreSQL (psycopg 3: ``has_copy``): one COPY of every column. COPY
      goes through psycopg's cursor, not Django's, so an execute wrapper sees no INSERT
      while the rows arrive: asserted below. Any number of rows takes it.
    - unkeyed, on SQLite: one ``executemany`` per plan (set of names), ``batch_size`` rows
      at a time (4 here, so a plan of more rows takes several);
    - keyed, on both: ``executemany`` of INSERT ... ON CONFLICT DO NOTHING (or INSERT OR
      IGNORE): never COPY."""
    given: list[dict[str, Any]] = []  # what schedule_many hands insert_many, as given
    real = row_insert.insert_many

    def spy(rows: Any, using: str, **options: Any) -> None:
        given.extend(copy.deepcopy(list(rows)))
        real(rows, using, **options)

    seen: list[tuple[str, bool]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append((sql, many))
        return execute(sql, params, many, context)

    monkeypatch.setattr(row_insert, "insert_many", spy)
    with transaction.atomic(), connection.execute_wrapper(wrapper):
        job_ids = set(schedule_many("tests.jobs.noop", _many_specs(keyed), max_attempts=4,
                                    backoff=[1, 2.5], queue="emails", batch_size=4))
        ours = _read(job_ids)
        transaction.set_rollback(True)
    inserts = [many for sql, many in seen if "INSERT" in sql.upper()]
    if connection.vendor == "postgresql" and not keyed:
        assert row_insert.has_copy(connection)  # psycopg 3: insert_many takes COPY
        assert inserts == []  # the rows arrived through COPY, no INSERT through Django's
    else:
        assert inserts and all(inserts)  # executemany (many=True) only
    assert {values["id"] for values in given} == job_ids == ours.keys()
    assert len(job_ids) == 12
    with transaction.atomic():
        for values in given:
            Job(**values).save(force_insert=True)
        orm = _read(job_ids)
        transaction.set_rollback(True)
    for pk, columns in ours.items():
        assert columns.keys() == orm[pk].keys()
        for column, value in columns.items():
            assert (pk, column, value) == (pk, column, orm[pk][column])
