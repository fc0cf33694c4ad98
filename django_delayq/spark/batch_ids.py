"""Job ids for a whole batch at once: the same ids as ``django_delayq.core.ids``, built by numpy.

``ids.new_id`` and ``ids.id_for_key`` render one number per call with a Python loop;
here the hashed bits of every row are cut into 5-bit groups and mapped onto the
Crockford alphabet as one array, leaving one slice per row. ``ids_for_rows`` makes the
ids of rows without a key in the layout of ``ids.new_id()``, its random bits hashed from
the call and the row instead, so that a retried Spark task makes the same ones. (numpy
comes with matplotlib, which the ``spark`` extra installs.)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from django_delayq.core.ids import _ALPHABET, _b32

_LETTERS = np.frombuffer(_ALPHABET.encode("ascii"), dtype=np.uint8)
_WEIGHTS = np.array([16, 8, 4, 2, 1], dtype=np.uint8)


def _split(text: str, width: int) -> list[str]:
    return [text[i:i + width] for i in range(0, len(text), width)]


def _with_time(ms: int, low: bytes, n: int) -> list[str]:
    """``n`` ids of 10 characters of milliseconds, then 16 characters: the low 5 bits of
    each of 16 bytes of ``low`` per row."""
    chars = np.empty((n, 26), dtype=np.uint8)
    chars[:, :10] = np.frombuffer(_b32(ms, 10).encode("ascii"), dtype=np.uint8)
    chars[:, 10:] = _LETTERS[np.frombuffer(low, dtype=np.uint8).reshape(n, 16) & 31]
    return _split(chars.tobytes().decode("ascii"), 26)


def ids_for_rows(call: str, call_ms: int, partition: int, rows: Sequence[bytes]) -> list[str]:
    """The ids of rows without a key, laid out like ``ids.new_id()`` (48 bits of
    milliseconds, ``call_ms``, then 80 bits) but the same whenever the same row is
    scheduled again by the same call: the 80 bits come from the blake2b digest of the
    call's id, the partition and ``rows``, each a row's position in the partition and its
    JSON arguments (``arrow_jobs``). A retried Spark task makes the ids its failed
    attempt made."""
    if not rows:
        return []
    prefix = ("%s\x00%d\x00" % (call, partition)).encode()
    digests = b"".join([hashlib.blake2b(prefix + row, digest_size=16).digest() for row in rows])
    return _with_time(call_ms, digests, len(rows))


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
