"""Job ids: 26-character, time-ordered (ULID layout), or derived from a key."""

from __future__ import annotations

import hashlib
import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case


def _b32(number: int, length: int) -> str:
    return "".join(_ALPHABET[(number >> 5 * i) & 31] for i in reversed(range(length)))


_PAIRS = [a + b for a in _ALPHABET for b in _ALPHABET]  # 10 bits -> 2 characters


def new_id() -> str:
    """48 bits of milliseconds then 80 random bits, as 26 base32 characters (the top two
    of 130 bits are zero): sortable by creation time."""
    n = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    return "".join([_PAIRS[(n >> shift) & 1023] for shift in _SHIFTS])


_SHIFTS = tuple(range(120, -1, -10))  # 13 pairs of characters, the highest first


def id_for_key(queue: str, key: str) -> str:
    """The job id of idempotency key ``key`` on ``queue``: same key, same id."""
    digest = hashlib.blake2b(("%s\x00%s" % (queue, key)).encode(), digest_size=16).digest()
    return "k" + _b32(int.from_bytes(digest, "big"), 25)
