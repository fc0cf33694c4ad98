"""The live server needs STATIC_URL; tests.settings has none (no staticfiles app)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _static_url_for_live_server() -> Iterator[None]:
    """Runs before pytest-django's session-scoped ``live_server`` starts its thread, whose
    static handler reads STATIC_URL once. Serves the admin's own CSS/JS from its app dir."""
    import django.contrib.admin
    from django.conf import settings
    from django.test import override_settings

    if getattr(settings, "STATIC_URL", None):
        yield
        return
    admin_static = Path(django.contrib.admin.__file__).parent / "static"
    with override_settings(STATIC_URL="/static/", STATIC_ROOT=str(admin_static)):
        yield
