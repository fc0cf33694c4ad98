"""JSON text of Arrow columns, checked once per column and batch instead of once per value.

A column of strings, integers or booleans is JSON by its type: integers and booleans
are cast in C, strings are quoted in C when none of them needs escaping (else
``json.dumps`` each; a NUL is refused, as ``schedule()`` refuses it). Floats are
checked for NaN/infinity as one vectorised test and rendered with ``float.__repr__``
(exactly what ``json.dumps`` writes). Only nested columns (lists, structs, maps) are
checked value by value, with the error naming the bad value like ``schedule()``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from django_delayq.core import validation

_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_NEEDS_ESCAPE = r'[\x00-\x1f"\\]'


def _first(mask: pa.Array) -> int:
    return int(pc.index(mask, True).as_py())


def _strings(col: pa.Array, where: str) -> pa.Array:
    if pa.types.is_large_string(col.type) or pa.types.is_string_view(col.type):
        col = col.cast(pa.string())
    if not pc.any(pc.match_substring_regex(col, _NEEDS_ESCAPE)).as_py():
        return pc.binary_join_element_wise('"', col, '"', "")
    nul = pc.fill_null(pc.match_substring(col, "\x00"), False)
    if pc.any(nul).as_py():  # schedule()'s refusal (validation.find_bad), with the row
        bad = _first(nul)
        raise validation.not_json("%s (row %d of the batch)"
                                  % (validation.find_bad(col[bad].as_py(), where), bad))
    return pa.array([None if v is None else _ENCODE(v) for v in col.to_pylist()], pa.string())


def _floats(col: pa.Array, where: str) -> pa.Array:
    finite = pc.fill_null(pc.is_finite(col), True)
    if not pc.all(finite).as_py():
        bad = _first(pc.invert(finite))
        raise validation.not_json("%s = %r (not finite, row %d of the batch)"
                       % (where, col[bad].as_py(), bad))
    return pa.array([None if v is None else float.__repr__(v) for v in col.to_pylist()],
                    pa.string())


def _plain(value: Any, kind: pa.DataType) -> Any:
    """Arrow maps arrive as lists of pairs: make them dicts (at any depth)."""
    if value is None:
        return None
    if pa.types.is_map(kind):
        return {k: _plain(v, kind.item_type) for k, v in value}
    if pa.types.is_struct(kind):
        return {f.name: _plain(value[f.name], f.type) for f in kind}
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [_plain(v, kind.value_type) for v in value]
    return value


def _nested(col: pa.Array, where: str) -> pa.Array:
    out = []
    for i, raw in enumerate(col.to_pylist()):
        value = _plain(raw, col.type)
        if bad := validation.find_bad(value, where):
            raise validation.not_json("%s (row %d of the batch)" % (bad, i))
        out.append(None if value is None else _ENCODE(value))
    return pa.array(out, pa.string())


def json_texts(col: pa.Array, where: str) -> pa.Array:
    """One JSON text per value of ``col`` (nulls become ``null``); ``where`` names the
    argument in errors, e.g. ``args[0] (column 'order_id')``."""
    kind = col.type
    if pa.types.is_null(kind):
        return pa.array(["null"] * len(col), pa.string())
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        text = pc.cast(col, pa.string())
    elif pa.types.is_floating(kind):
        text = _floats(col, where)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind) or \
            pa.types.is_string_view(kind):
        text = _strings(col, where)
    elif pa.types.is_nested(kind):
        text = _nested(col, where)
    else:
        raise validation.not_json("%s of Arrow type %s" % (where, kind))
    return pc.fill_null(text, "null") if text.null_count else text


def join(pieces: Sequence[Any]) -> pa.Array:
    """Concatenate string arrays and constant strings element-wise."""
    return pc.binary_join_element_wise(*pieces, "")


def args_array(texts: Sequence[pa.Array], n: int) -> pa.Array:
    """``[a0,a1,...]`` per row."""
    if not texts:
        return pa.array(["[]"] * n, pa.string())
    pieces: list[Any] = ["["]
    for i, text in enumerate(texts):
        pieces += [text, "," if i < len(texts) - 1 else "]"]
    return join(pieces)


def kwargs_array(names: Sequence[str], texts: Sequence[pa.Array], n: int) -> pa.Array:
    """``{"name":value,...}`` per row."""
    if not texts:
        return pa.array(["{}"] * n, pa.string())
    pieces: list[Any] = []
    for i, (name, text) in enumerate(zip(names, texts, strict=True)):
        pieces += [("{" if i == 0 else ",") + _ENCODE(name) + ":", text]
    return join(pieces + ["}"])
