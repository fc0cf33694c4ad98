"""``manage.py shop_demo``: schedule, once per database, the jobs that make a first visit
of the admin show each thing it can show (run.py calls it at start):

* a retry: ``sync_supplier_stock`` fails twice, then succeeds (backoff 10 s, then 20 s);
* a dead job with its traceback: ``charge_card`` is declined (one attempt);
* a running slow job with progress: ``rebuild_search_index`` (two minutes);
* a chain: a paid demo order is packed, then shipped (``pack_order`` -> ``ship_order``),
  the second job due a minute after the first so the chain is seen half done;
* the two-minute periodic schedule ``restock-check`` comes from the settings.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from django_delayq import chain, job, schedule
from django_delayq.models import Job
from shop.models import Order

KEY = "shop-demo:"


class Command(BaseCommand):
    help = "Schedule the demo jobs of the example shop (once per database)."

    def handle(self, *args: Any, **options: Any) -> None:
        if Job.objects.filter(key__startswith=KEY).exists():
            self.stdout.write("demo jobs: already scheduled")
            return
        schedule("shop.tasks.sync_supplier_stock", key=KEY + "retry", max_attempts=3,
                 backoff=[10, 20])
        schedule("shop.tasks.charge_card", 1, "4242", key=KEY + "dead", max_attempts=1)
        schedule("shop.tasks.rebuild_search_index", 120, key=KEY + "slow", max_attempts=1)
        order = Order.objects.create(item="demo kettle", status=Order.Status.PAID)
        chain(job("shop.tasks.pack_order").using(key=KEY + "pack").s(order.pk),
              job("shop.tasks.ship_order").using(key=KEY + "ship", delay=60).s(order.pk))
        self.stdout.write("demo jobs: a retry, a dead job, a slow job and a chain scheduled")
