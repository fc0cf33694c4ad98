"""``delayq.W020``: a database delayq writes to that is SQLite in its default DEFERRED
transaction mode. There a transaction that reads, then writes (``schedule(...,
after=...)``, ``set_group_limit``) fails at once with "database is locked" while a worker
writes, whatever the ``timeout``: ``transaction_mode: IMMEDIATE`` is needed
(docs/deployment.md, docs/settings.md)."""

from __future__ import annotations

import pytest
from django.core import checks as django_checks
from django.db import connections

from django_delayq.observe import checks

pytestmark = pytest.mark.skipif(connections["default"].vendor != "sqlite",
                                reason="SQLite only: the tests' database is another")


def ids() -> list[str]:
    return [m.id for m in checks.check_sqlite_transactions()]


def test_immediate_has_no_warning() -> None:
    assert connections["default"].settings_dict["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert ids() == []


@pytest.mark.parametrize("mode", [None, "DEFERRED", "deferred"])
def test_deferred_is_a_warning_naming_the_alias(monkeypatch, mode) -> None:  # type: ignore[no-untyped-def]
    options = connections["default"].settings_dict["OPTIONS"]
    if mode is None:  # Django's default: no transaction_mode
        monkeypatch.delitem(options, "transaction_mode")
    else:
        monkeypatch.setitem(options, "transaction_mode", mode)
    [warning] = checks.check_sqlite_transactions()
    assert warning.id == "delayq.W020" and warning.obj == "DATABASES['default']"
    assert "database is locked" in warning.msg and "'IMMEDIATE'" in str(warning.hint)


def test_exclusive_takes_the_write_lock_too(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setitem(connections["default"].settings_dict["OPTIONS"], "transaction_mode",
                        "EXCLUSIVE")
    assert ids() == []


def test_it_is_registered() -> None:
    assert checks.check_sqlite_transactions in django_checks.registry.registry.get_checks()
