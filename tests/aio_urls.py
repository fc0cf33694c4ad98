"""Async views as an ASGI project would write them, for tests/core/test_aio.py."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import path

from django_delayq import acancel, aschedule, await_result
from django_delayq.exceptions import InvalidJob, WaitTimeout


async def place(request: HttpRequest) -> JsonResponse:
    try:
        handle = await aschedule("tests.jobs.add", int(request.GET["a"]), 2,
                                 delay=float(request.GET.get("delay", 0)))
    except InvalidJob as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"id": handle.id, "queue": handle.queue})


async def cancel(request: HttpRequest, job_id: str) -> JsonResponse:
    return JsonResponse({"outcome": (await acancel(job_id)).name})


async def result(request: HttpRequest, job_id: str) -> JsonResponse:
    try:
        value = await await_result(job_id, timeout=float(request.GET["timeout"]))
    except WaitTimeout as exc:
        return JsonResponse({"timeout": str(exc)}, status=504)
    return JsonResponse({"result": value})


urlpatterns = [path("place/", place), path("cancel/<str:job_id>/", cancel),
               path("result/<str:job_id>/", result)]
