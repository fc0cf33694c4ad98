"""``registry.Binder`` checks positional arguments by counting where it can: it must
accept exactly what ``inspect.Signature.bind`` (Python's own binding) accepts."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from django_delayq import InvalidJob
from django_delayq.core.registry import Binder


def _pair(a: Any, b: Any = 1) -> None:
    return None


def _star(*args: Any) -> None:
    return None


def _mixed(a: Any, /, b: Any, *args: Any, c: Any = 1) -> None:
    return None


def _keyword_only_required(a: Any, *, c: Any) -> None:
    return None


def _named_and_rest(a: Any, b: Any, **kw: Any) -> None:
    return None


def _anything(*args: Any, **kwargs: Any) -> None:
    return None


def _nothing() -> None:
    return None


def _binds(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("fn", [_pair, _star, _mixed, _keyword_only_required,
                                _named_and_rest, _anything, _nothing])
def test_binder_accepts_exactly_the_arguments_python_binds(fn: Any) -> None:
    binder = Binder("tests.x", inspect.signature(fn))
    for n in range(5):
        for kwargs in ({}, {"c": 1}, {"b": 2}, {"zz": 3}):
            args = tuple(range(n))
            try:
                binder.check(args, kwargs)
                accepted = True
            except InvalidJob:
                accepted = False
            assert accepted == _binds(fn, args, kwargs), (fn.__name__, args, kwargs)


def test_positional_arguments_alone_are_counted_without_binding() -> None:
    assert Binder("tests.x", inspect.signature(_star)).counts is not None
    assert Binder("tests.x", inspect.signature(_mixed)).counts is not None
    assert Binder("tests.x", inspect.signature(_keyword_only_required)).counts is None
