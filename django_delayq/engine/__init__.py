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
from django_delayq.engine.keys import GroupKeys, QueueKeys
from django_delayq.engine.results import Grant, LimitState, QueueLimit

__all__ = [
    "CancelOutcome",
    "ClaimResult",
    "ClaimedJob",
    "Engine",
    "Grant",
    "GroupKeys",
    "JobLocation",
    "LimitState",
    "NackOutcome",
    "NewJob",
    "QueueKeys",
    "QueueLimit",
    "QueueStats",
    "Recovered",
    "SetAside",
    "bad_id",
]
