"""pytest fixtures for projects that use django-delayq.

Installed with django-delayq, pytest loads it by itself (its ``pytest11`` entry point):
do not list it in ``pytest_plugins`` (pytest refuses a plugin registered twice). With
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, pass ``-p django_delayq.pytest_plugin`` (and
``-p pytest_django.plugin``). See docs/testing.md.

* ``delayq``: a unique ``DELAYQ["PREFIX"]`` for the test (its Redis keys are deleted
  afterwards) and the test clock; yields ``django_delayq.testing.DelayQ`` with
  ``run_due_jobs(now=None)``, ``advance(timedelta)``, ``jobs(**filters)``, ``purge()``,
  ``engine``.
* ``delayq_eager``: ``DELAYQ["EAGER"] = True`` for the test: ``schedule()`` runs the job
  inline once the surrounding transaction commits (no Redis involved); a failing job's
  exception is raised out of the commit (or of ``schedule()`` in autocommit).

Both need the database (``@pytest.mark.django_db``); pytest-django must be installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from django.conf import settings
from django.test import override_settings

if TYPE_CHECKING:  # imported lazily: pytest loads this plugin before Django is set up
    from django_delayq.testing import DelayQ


@pytest.fixture
def delayq() -> Iterator[DelayQ]:
    from django_delayq import testing  # lazy: pytest loads plugins before Django is set up

    with testing.isolated() as helper:
        yield helper


@pytest.fixture
def delayq_eager() -> Iterator[None]:
    current = dict(getattr(settings, "DELAYQ", {}) or {})
    with override_settings(DELAYQ={**current, "EAGER": True}):
        yield
