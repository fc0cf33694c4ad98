"""Job ids for a whole batch at once: the same ids as ``django_delayq.core.ids``, built by numpy.

``ids.new_id`` and ``ids.id_for_key`` render one number per call with a Python loop;
here the random or hashed bits of every row are cut into 5-bit groups and mapped onto
the Crockford alphabet as one array, leaving one slice per row. (numpy comes with
matplotlib, which the ``spark`` extra installs.)
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence

import numpy as np

from django_delayq.core.ids import _ALPHABET, _b32

_LETTERS = np.frombuffer(_ALPHABET.encode("ascii"), dtype=np.uint8)
_WEIGHTS = np.array([16, 8, 4, 2, 1], dtype=np.uint8)


def _split(text: str, width: int) -> list[str]:
    return [text[i:i + width] for i in range(0, len(text), width)]


def new_ids(n: int, now_ms: int | None = None) -> list[str]:
    """``n`` ids laid out like ``ids.new_id()``: 10 characters of milliseconds (shared by
    the batch), then 16 random characters (80 random bits: 16 random bytes, 5 bits each)."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    chars = np.empty((n, 26), dtype=np.uint8)
    chars[:, :10] = np.frombuffer(_b32(ms, 10).encode("ascii"), dtype=np.uint8)
    random = np.frombuffer(os.urandom(16 * n), dtype=np.uint8).reshape(n, 16)
    chars[:, 10:] = _LETTERS[random & 31]
    return _split(chars.tobytes().decode("ascii"), 26)


def ids_for_keys(queue: str, keys: Sequence[str]) -> list[str]:
    """``ids.id_for_key(queue, key)`` for every key: ``k`` + the low 125 bits of the
    key's blake2b-128 digest in 25 base32 characters."""
    if not keys:
        return []
    prefix = (queue + "\x00").encode()
    digests = b"".join([hashlib.blake2b(prefix + key.encode(), digest_size=16).digest()
                        for key in keys])
    bits = np.unpackbits(np.frombuffer(digests, dtype=np.uint8).reshape(len(keys), 16), axis=1)
    groups = bits[:, 3:].reshape(len(keys), 25, 5) @ _WEIGHTS
    chars = np.empty((len(keys), 26), dtype=np.uint8)
    chars[:, 0] = ord("k")
    chars[:, 1:] = _LETTERS[groups]
    return _split(chars.tobytes().decode("ascii"), 26)
