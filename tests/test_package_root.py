"""The package root: its public names, loaded lazily, and an import that needs no settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import django_delayq

ROOT = Path(__file__).resolve().parents[1]

NO_SETTINGS = """
import sys
import django_delayq
loaded = sorted(m for m in sys.modules if m == "django" or m.startswith(("django.", "django_delayq.")))
assert not loaded, loaded
assert set(django_delayq.__all__) <= set(dir(django_delayq))
from django_delayq import CancelOutcome, DelayQError, InvalidJob, MoveOutcome
assert not any(m == "django" or m.startswith("django.") for m in sys.modules)
print("ok", CancelOutcome.CANCELLED.name, MoveOutcome.MOVED.name)
"""


def test_import_needs_no_settings_and_imports_nothing_else() -> None:
    """``import django_delayq`` works before Django is configured; the engine's outcomes
    and the errors resolve without importing Django."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", NO_SETTINGS], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ok", "CANCELLED", "MOVED"]


def test_every_public_name_resolves_to_its_module_s_object() -> None:
    from django_delayq.core import api
    from django_delayq.engine import engine

    assert {"job", "JobCall", "CancelOutcome", "MoveOutcome", "schedule"} <= set(
        django_delayq.__all__)
    for name in django_delayq.__all__:
        value = getattr(django_delayq, name)
        assert value is not None and getattr(value, "__name__", name) == name, name
    assert django_delayq.job is api.job and django_delayq.schedule is api.schedule
    assert django_delayq.CancelOutcome is engine.CancelOutcome
    assert django_delayq.MoveOutcome is engine.MoveOutcome
    assert sorted(dir(django_delayq)) == sorted([*django_delayq.__all__, "__version__"])


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="schedule_later"):
        django_delayq.schedule_later  # type: ignore[attr-defined]  # noqa: B018
