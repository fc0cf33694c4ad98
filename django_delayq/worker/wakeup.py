"""The worker's side of the wake channels: the listener thread is the engine's
(``django_delayq.engine.wake``: the subscription, its reconnects, what a message may
hold); the worker gets one from ``Engine.wake_listener`` and keeps its clocks on the
local monotonic time below.
"""

from __future__ import annotations

import time

from django_delayq.engine.wake import WakeListener

__all__ = ["WakeListener", "monotonic_ms"]


def monotonic_ms() -> float:
    return time.monotonic() * 1000
