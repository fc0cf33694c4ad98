from django.contrib import admin

from shop.models import Order


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "item", "status", "created_at", "closed_at", "close_job_id"]
    list_filter = ["status"]
