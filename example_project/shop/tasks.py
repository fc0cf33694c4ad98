"""Job functions: the only module DELAYQ['ALLOWED_CALLABLES'] lets a worker run."""

import logging

from django.utils import timezone

from shop.models import Order

logger = logging.getLogger(__name__)


def close_unpaid_order(order_id: int) -> str:
    """Close the order if it is still unpaid (idempotent: safe to run twice)."""
    updated = Order.objects.filter(pk=order_id, status=Order.Status.UNPAID).update(
        status=Order.Status.CLOSED, closed_at=timezone.now())
    logger.info("order %s: %s", order_id, "closed" if updated else "already paid or closed")
    return "closed" if updated else "unchanged"
