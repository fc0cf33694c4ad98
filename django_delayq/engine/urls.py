"""Redis URL schemes the engine understands (no Django: settings checks use these too)."""

from __future__ import annotations

CLUSTER_SCHEMES = ("redis+cluster://", "rediss+cluster://")


def is_cluster_url(url: str | None) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``)."""
    return bool(url) and str(url).startswith(CLUSTER_SCHEMES)
