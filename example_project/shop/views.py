from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from django_delayq import JobSpec, cancel, chain, group, job, schedule, schedule_many
from django_delayq.models import Job
from shop.models import Order


def index(request):
    orders = list(Order.objects.all()[:20])
    jobs = {j.id: j for j in Job.objects.filter(id__in=[o.close_job_id for o in orders])}
    rows = [(o, jobs.get(o.close_job_id)) for o in orders]
    return render(request, "shop/index.html", {
        "rows": rows, "timeout": settings.UNPAID_ORDER_TIMEOUT_SECONDS})


@require_POST
def create_order(request):
    with transaction.atomic():  # the job reaches Redis only if the order commits
        order = Order.objects.create(item=request.POST.get("item") or "teapot")
        job = schedule("shop.tasks.close_unpaid_order", order.pk,
                       delay=timedelta(seconds=settings.UNPAID_ORDER_TIMEOUT_SECONDS))
        order.close_job_id = job.id
        order.save(update_fields=["close_job_id"])
    messages.info(request, "Order #%d created; it closes in %gs unless paid."
                  % (order.pk, settings.UNPAID_ORDER_TIMEOUT_SECONDS))
    return redirect("index")


@require_POST
def pay_order(request, pk: int):
    with transaction.atomic():
        order = get_object_or_404(Order.objects.select_for_update(), pk=pk)
        if order.status != Order.Status.UNPAID:
            messages.warning(request, "Order #%d is already %s." % (pk, order.status))
            return redirect("index")
        order.status = Order.Status.PAID
        order.save(update_fields=["status"])
    outcome = cancel(order.close_job_id)
    # A chain (docs/workflows.md): ship only after packing succeeded.
    chain(job("shop.tasks.pack_order").s(pk), job("shop.tasks.ship_order").s(pk))
    messages.success(request, "Order #%d paid; closing job: %s; packing and shipping "
                     "scheduled." % (pk, outcome.name.lower()))
    return redirect("index")


@require_POST
def invoices(request):
    """Two customers share the queue: acme floods it, then bob sends a few. Each is a group
    (docs/groups.md): workers take their jobs in turns, so bob's run at once."""
    schedule_many("shop.tasks.send_invoice", [JobSpec(args=["acme", i]) for i in range(2000)],
                  group="acme")
    schedule_many("shop.tasks.send_invoice", [JobSpec(args=["bob", i]) for i in range(5)],
                  group="bob")
    messages.info(request, "acme sent 2,000 invoices, then bob 5: bob's run in turns with "
                  "acme's, not after them (docs/groups.md).")
    return redirect("index")


@require_POST
def report(request):
    """A fan-out/fan-in: one job per order, then one summary once all succeeded."""
    ids = list(Order.objects.values_list("pk", flat=True)[:100])
    done = group([job("shop.tasks.count_order").s(pk) for pk in ids],
                 then=job("shop.tasks.report_ready").s(len(ids)))
    messages.info(request, "Report of %d orders scheduled: job %s runs after them."
                  % (len(ids), done.then.id if done.then else "-"))
    return redirect("index")
