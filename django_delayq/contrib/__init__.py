"""Built-in jobs, always in ``DELAYQ["ALLOWED_CALLABLES"]`` (no user code needed).

* ``django_delayq.contrib.http.post_json``: POST a JSON body to a URL; 2xx = success.
"""
