"""HTTP callback jobs: ``post_json(url, body)`` succeeds on a 2xx answer and raises on
anything else (another status, a timeout, a refused connection), so the job's retry
and backoff policy applies. Standard library only (``urllib``)::

    schedule("django_delayq.contrib.http.post_json", url, {"order": 42, "paid": True},
             backoff=UPSTREAM_BACKOFF)   # 15s 3m 10m 30m 30m 1h 2h 6h 15h, then dead

Redirects are not followed (a 3xx is a failure: a POST must not silently become a
GET). Each request carries ``Idempotency-Key: <job id>`` and ``X-DelayQ-Attempt``, so
the receiver can drop the duplicate an at-least-once delivery may produce.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django_delayq.context import current_job

logger = logging.getLogger(__name__)

UPSTREAM_BACKOFF = [15, 180, 600, 1800, 1800, 3600, 7200, 21600, 54000]
DEFAULT_TIMEOUT = 10.0
MAX_BODY_BYTES = 64 * 1024  # of the answer read back
RESULT_BODY_CHARS = 1000  # of the answer kept in the job's result


class CallbackFailed(Exception):
    """The callback did not answer with an expected status (``status`` None: no answer)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


_opener = urllib.request.build_opener(_NoRedirect)


def _expected(expected: int | Iterable[int] | None) -> set[int] | range:
    if expected is None:
        return range(200, 300)
    if isinstance(expected, int):
        return {expected}
    return set(expected)


def _request(url: str, body: Any, headers: dict[str, str] | None) -> urllib.request.Request:
    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError("post_json needs an http:// or https:// URL, not %r" % (url,))
    sent = {"Content-Type": "application/json", "User-Agent": "django-delayq"}
    job = current_job()
    if job is not None:
        sent.update({"Idempotency-Key": job.id, "X-DelayQ-Attempt": str(job.attempt)})
    sent.update(headers or {})
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return urllib.request.Request(url, data=data, headers=sent, method="POST")


def post_json(url: str, body: Any = None, *, timeout: float = DEFAULT_TIMEOUT,
              headers: dict[str, str] | None = None,
              expected: int | Iterable[int] | None = None) -> dict[str, Any]:
    """POST ``body`` as JSON to ``url``; return ``{"status", "body"}`` on an expected
    status (default: any 2xx), else raise ``CallbackFailed`` (the job is retried)."""
    request = _request(url, body, headers)
    try:
        with _opener.open(request, timeout=timeout) as response:
            status, raw = response.status, response.read(MAX_BODY_BYTES)
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read(MAX_BODY_BYTES)
        exc.close()
    except TimeoutError as exc:
        raise CallbackFailed("POST %s: no answer within %ss" % (url, timeout)) from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise CallbackFailed("POST %s: no answer within %ss" % (url, timeout)) from exc
        raise CallbackFailed("POST %s: %s" % (url, exc.reason)) from exc
    text = raw.decode("utf-8", errors="replace")
    if status not in _expected(expected):
        raise CallbackFailed("POST %s answered %d: %s" % (url, status, text[:200]), status)
    logger.debug("POST %s answered %d", url, status)
    return {"status": status, "body": text[:RESULT_BODY_CHARS]}
