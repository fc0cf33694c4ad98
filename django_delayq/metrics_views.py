"""``metrics``: a Django view serving the Prometheus text format.

Add it to your ``urls.py`` (behind your own access control)::

    from django_delayq.metrics_views import metrics
    urlpatterns += [path("metrics/delayq", metrics)]
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from django_delayq.observe import prometheus as delayq_metrics


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    body, content_type = delayq_metrics.exposition()
    return HttpResponse(body, content_type=content_type)
