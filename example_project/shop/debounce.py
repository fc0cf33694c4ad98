"""Debounce with ``on_conflict="replace"`` (docs/workflows.md, "Deduplication and
debounce"): an unpaid order closes a while after the customer's *last* activity on it,
not after the first.

Call ``order_touched(order)`` wherever the customer acts on an unpaid order (edits the
cart, opens the payment page): each call schedules the close again, due the full timeout
from now, and the pending close job it replaces ends ``cancelled`` ("replaced by
<the new job's id>"). The order keeps the id of the close job that counts, so
``views.pay_order`` cancels that one.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction

from django_delayq import schedule
from shop.models import Order


def order_touched(order: Order) -> str:
    """Push the close of ``order`` back by the whole timeout; returns the close job's id."""
    with transaction.atomic():  # the key and the order's job id change together
        handle = schedule("shop.tasks.close_unpaid_order", order.pk,
                          key="close-order-%d" % order.pk, on_conflict="replace",
                          delay=timedelta(seconds=settings.UNPAID_ORDER_TIMEOUT_SECONDS))
        Order.objects.filter(pk=order.pk).update(close_job_id=handle.id)
    return handle.id
