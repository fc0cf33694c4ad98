from django.db import models


class Order(models.Model):
    class Status(models.TextChoices):
        UNPAID = "unpaid"
        PAID = "paid"
        CLOSED = "closed"  # not paid in time

    item = models.CharField(max_length=100)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.UNPAID)
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    close_job_id = models.CharField(max_length=26, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return "Order #%d (%s, %s)" % (self.pk, self.item, self.status)
