"""Job ids: 26-character, time-ordered (ULID layout), or derived from a key."""

from __future__ import annotations

import hashlib
import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _b32(number: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[number & 31])
        number >>= 5
    return "".join(reversed(out))


def new_id() -> str:
    """48 bits of milliseconds then 80 random bits: sortable by creation time."""
    ms = time.time_ns() // 1_000_000
    return _b32(ms, 10) + _b32(int.from_bytes(os.urandom(10), "big"), 16)


def id_for_key(queue: str, key: str) -> str:
    """The job id of idempotency key ``key`` on ``queue``: same key, same id."""
    digest = hashlib.blake2b(("%s\x00%s" % (queue, key)).encode(), digest_size=16).digest()
    return "k" + _b32(int.from_bytes(digest, "big"), 25)
