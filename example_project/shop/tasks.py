"""Job functions: the only module DELAYQ['ALLOWED_CALLABLES'] lets a worker run."""

import logging
import time

from django.utils import timezone

from django_delayq import current_job, report_progress
from shop.models import Order

logger = logging.getLogger(__name__)


def close_unpaid_order(order_id: int) -> str:
    """Close the order if it is still unpaid (idempotent: safe to run twice)."""
    updated = Order.objects.filter(pk=order_id, status=Order.Status.UNPAID).update(
        status=Order.Status.CLOSED, closed_at=timezone.now())
    logger.info("order %s: %s", order_id, "closed" if updated else "already paid or closed")
    return "closed" if updated else "unchanged"


def pack_order(order_id: int) -> str:
    """First step of the chain a payment starts (views.pay_order): pack, then ship."""
    logger.info("order %s: packed", order_id)
    return "packed"


def ship_order(order_id: int) -> str:
    """Runs only after pack_order succeeded (``chain``)."""
    logger.info("order %s: shipped", order_id)
    return "shipped"


def count_order(order_id: int) -> str:
    """One member of the report's fan-out (views.report): looks at one order."""
    status = Order.objects.filter(pk=order_id).values_list("status", flat=True).first()
    return status or "gone"


def report_ready(count: int) -> str:
    """The fan-in: runs once, after every count_order of the group succeeded."""
    logger.info("report of %d orders ready", count)
    return "report of %d orders" % count


def send_invoice(customer: str, number: int) -> str:
    """One invoice of a customer (views.invoices: each customer is a group of the queue)."""
    time.sleep(0.01)  # the mail server
    return "%s: invoice %d sent" % (customer, number)


def nightly_unpaid_report() -> str:
    """The nightly schedule (settings DELAYQ['SCHEDULES'], docs/periodic.md): counts the
    orders still unpaid."""
    unpaid = Order.objects.filter(status=Order.Status.UNPAID).count()
    logger.info("nightly report: %d unpaid order(s)", unpaid)
    return "%d unpaid" % unpaid


# -- what a first visit of the admin shows (shop/demo.py schedules them once) -------------


class SupplierUnavailable(ConnectionError):
    """The supplier's API did not answer: worth retrying."""


class CardDeclined(Exception):
    """The bank said no: retrying changes nothing."""


def sync_supplier_stock() -> str:
    """Fails its first two attempts (the supplier is "down"), succeeds on the third: the
    admin shows it *retrying*, its attempt history, then *succeeded*."""
    attempt = current_job().attempt  # type: ignore[union-attr]
    if attempt < 3:
        raise SupplierUnavailable("supplier API did not answer within 5 s (attempt %d)"
                                  % attempt)
    return "stock synced on attempt %d" % attempt


def charge_card(order_id: int, last4: str) -> str:
    """Always declined: with max_attempts=1 the job is *dead*, with its traceback."""
    raise CardDeclined("card ending %s declined for order #%d: insufficient funds"
                       % (last4, order_id))


def rebuild_search_index(seconds: int = 120) -> str:
    """A slow job: *running* for ``seconds``, reporting its progress every second."""
    for done in range(seconds):
        report_progress({"done": done, "total": seconds})
        time.sleep(1)
    return "index rebuilt"


def restock_check() -> str:
    """The two-minute schedule (settings DELAYQ["SCHEDULES"])."""
    low = Order.objects.filter(status=Order.Status.UNPAID).count()
    return "%d order(s) waiting for stock" % low
