#!/usr/bin/env python
"""The example shop's manage.py, pointed at the Redis the running example uses.

``make example`` (run.py) starts an embedded redis-server and writes its URL to
``.redis/url`` (``SHOP_REDIS_DIR`` moves that directory); this script reads it, so
``.venv/bin/python example_project/manage.py delayq_status`` looks at the shop's own Redis. With
DELAYQ_REDIS_URL set, that Redis is used instead. With neither, it refuses to start rather
than fall back to a Redis on localhost:6379 that the shop does not use.
"""

import os
import sys
from pathlib import Path
from typing import NoReturn

HERE = Path(__file__).resolve().parent
EXIT_CONFIG = 2  # as delayq_worker: bad configuration


def refuse(message: str) -> NoReturn:
    print("manage.py: " + message, file=sys.stderr)
    sys.exit(EXIT_CONFIG)


def redis_dir() -> Path:
    return Path(os.environ.get("SHOP_REDIS_DIR") or HERE / ".redis")


def embedded_url() -> str | None:
    """The URL run.py wrote for the embedded Redis it started, if it did."""
    try:
        return (redis_dir() / "url").read_text().strip() or None
    except FileNotFoundError:
        return None


def find_redis() -> str:
    """DELAYQ_REDIS_URL, else the running example's embedded Redis; exits with a message
    saying how to point this script at a Redis when there is neither."""
    if os.environ.get("DELAYQ_REDIS_URL"):
        return os.environ["DELAYQ_REDIS_URL"]
    url = embedded_url()
    if url is None:
        refuse("no Redis for the example shop. Start the shop first with "
                 "`make example` (it writes its embedded Redis URL to %s), or point this "
                 "script at a Redis: DELAYQ_REDIS_URL=redis://host:6379/0 .venv/bin/python "
                 "example_project/manage.py ..." % (redis_dir() / "url"))
    sys.path.insert(0, str(HERE.parent))
    from django_delayq.engine.client import answers

    if not answers(url):
        refuse("the example's embedded Redis (%s, from %s) does not answer: is "
                 "`make example` still running? Start it again, or set DELAYQ_REDIS_URL."
                 % (url, redis_dir() / "url"))
    return url


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shopsite.settings")
    os.environ["DELAYQ_REDIS_URL"] = find_redis()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
