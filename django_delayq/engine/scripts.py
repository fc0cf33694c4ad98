"""Loads ``django_delayq/lua/*.lua`` once and runs them by SHA (EVALSHA).

A server that lost its script cache (restart, SCRIPT FLUSH, a new cluster node)
answers NOSCRIPT; the script is then sent with EVAL once, which also caches it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

SCRIPT_NAMES = (
    "enqueue",
    "claim",
    "ack",
    "nack",
    "extend",
    "recover",
    "cancel",
    "reschedule",
    "requeue",
    "release",
    "stats",
    "inspect",
    "events_add",
)


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str
    sha: str

    def __call__(self, client: Any, keys: tuple[str, ...], args: list[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return client.eval(self.source, len(keys), *keys, *args)

    def queue(self, pipe: Any, keys: tuple[str, ...], args: list[Any]) -> None:
        """Add an EVAL of this script to ``pipe`` (inside MULTI a NOSCRIPT could not be
        retried). ``execute_command``: a cluster pipeline's ``eval()`` takes no script."""
        pipe.execute_command("EVAL", self.source, len(keys), *keys, *args)


@cache
def load(name: str) -> Script:
    source = resources.files("django_delayq").joinpath("lua", name + ".lua").read_text("utf-8")
    return Script(name=name, source=source, sha=hashlib.sha1(source.encode()).hexdigest())
