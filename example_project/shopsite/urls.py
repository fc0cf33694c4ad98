from django.contrib import admin
from django.urls import path
from shop import views

urlpatterns = [
    path("", views.index, name="index"),
    path("orders/", views.create_order, name="create_order"),
    path("orders/<int:pk>/pay/", views.pay_order, name="pay_order"),
    path("report/", views.report, name="report"),
    path("invoices/", views.invoices, name="invoices"),
    path("admin/", admin.site.urls),
]
