"""Built-in jobs (no user code needed), allowed only when their module is listed in
``DELAYQ["ALLOWED_CALLABLES"]`` (e.g. ``"django_delayq.contrib.http"``).

* ``django_delayq.contrib.http.post_json``: POST a JSON body to a URL; 2xx = success.
"""
