"""Metrics per group are opt-in (``METRICS_GROUPS``: label cardinality): off, no group
gauge; on, the due and running jobs and the paused state of the busiest groups."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_delayq import compat, pause_group, schedule
from django_delayq.core.conf import get_settings

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif(compat.prometheus_client is None, reason="no prometheus")]


def value(name: str, **labels: str) -> float | None:
    from django_delayq.observe import prometheus

    return prometheus.REGISTRY.get_sample_value(name, labels)


def test_group_gauges_only_when_asked(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    for i in range(2):
        schedule("tests.jobs.noop", i, group="acme")
    schedule("tests.jobs.noop", group="bob")
    pause_group("default", "bob")
    assert value("delayq_group_due_jobs", queue="default", group="acme") is None
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "METRICS_GROUPS": 1}
    assert value("delayq_group_due_jobs", queue="default", group="acme") == 2
    assert value("delayq_group_running", queue="default", group="acme") == 0
    assert value("delayq_group_paused", queue="default", group="acme") == 0
    assert value("delayq_group_due_jobs", queue="default", group="bob") is None  # 1 shown
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "METRICS_GROUPS": 5}
    assert value("delayq_group_paused", queue="default", group="bob") == 1


def test_a_bad_metrics_groups_setting_is_named(delayq_settings) -> None:  # type: ignore[no-untyped-def]
    delayq_settings.DELAYQ = {**delayq_settings.DELAYQ, "METRICS_GROUPS": 0}
    with pytest.raises(ImproperlyConfigured, match="METRICS_GROUPS"):
        get_settings()
