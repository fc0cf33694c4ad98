"""Layer 0: the Redis engine. Redis and Lua only; never imports Django."""

from django_delayq.engine.keys import CallableLimitKeys, QueueKeys
from django_delayq.engine.outcomes import (
    CancelOutcome,
    ClaimedJob,
    ClaimResult,
    Contact,
    Grant,
    JobLocation,
    LimitState,
    NackOutcome,
    NewJob,
    QueueLimit,
    QueueStats,
    Recovered,
    SetAside,
)
from django_delayq.engine.replies import bad_id
from django_delayq.engine.sharded import ShardedEngine, ShardLimitError

# The engine of every caller: engine.py's, each queue spread over its shards (a queue of
# one shard, the default, is engine.py's queue unchanged).
Engine = ShardedEngine
__all__ = ["CancelOutcome", "ClaimResult", "ClaimedJob", "Contact", "Engine", "Grant",
           "CallableLimitKeys", "JobLocation", "LimitState", "NackOutcome", "NewJob", "QueueKeys",
           "QueueLimit", "QueueStats", "Recovered", "SetAside", "ShardLimitError",
           "ShardedEngine", "bad_id"]
