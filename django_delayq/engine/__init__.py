"""Layer 0: the Redis engine. Redis and Lua only; never imports Django."""

from django_delayq.engine.engine import (
    CancelOutcome,
    ClaimedJob,
    ClaimResult,
    Engine,
    JobLocation,
    NackOutcome,
    NewJob,
    QueueStats,
    Recovered,
    SetAside,
    bad_id,
)
from django_delayq.engine.keys import QueueKeys

__all__ = [
    "CancelOutcome",
    "ClaimResult",
    "ClaimedJob",
    "Engine",
    "JobLocation",
    "NackOutcome",
    "NewJob",
    "QueueKeys",
    "QueueStats",
    "Recovered",
    "SetAside",
    "bad_id",
]
