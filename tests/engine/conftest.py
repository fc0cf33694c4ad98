"""Markers of the engine tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "script_bounds: a 100,000-job backlog scheduled and drained with the "
        "SLOWLOG watching every script call (about a minute)")
