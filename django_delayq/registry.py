"""Dotted path <-> callable, through an allow-list of module prefixes.

Whoever can write to Redis must not be able to run arbitrary code: the worker
resolves a job's path only when it lies under ``DELAYQ["ALLOWED_CALLABLES"]``
(default: the packages of ``INSTALLED_APPS`` outside ``django.*``, plus
``django_delayq.contrib``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from functools import cache
from typing import Any

from django_delayq.exceptions import InvalidJob

BUILTIN_ALLOWED = ("django_delayq.contrib",)


@cache
def allowed_prefixes() -> tuple[str, ...]:
    from django_delayq.conf import get_settings

    configured = get_settings().allowed_callables
    if configured is not None:
        return tuple(configured) + BUILTIN_ALLOWED
    from django.apps import apps

    names = {
        cfg.name for cfg in apps.get_app_configs()
        if not cfg.name.startswith("django.") and cfg.name != "django_delayq"
    }
    return tuple(sorted(names)) + BUILTIN_ALLOWED


def reset() -> None:
    allowed_prefixes.cache_clear()
    _resolve.cache_clear()


def is_allowed(path: str) -> bool:
    return any(path == p or path.startswith(p + ".") for p in allowed_prefixes())


def path_of(fn: Any) -> str:
    """The dotted path of a module-level function; refuses what a worker could not import."""
    if isinstance(fn, str):
        return fn
    if not callable(fn):
        raise InvalidJob("expected a function or a dotted path, got %r" % (fn,))
    target = getattr(fn, "func", None) if type(fn).__name__ == "Task" else fn  # Django Task
    target = target or fn
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if not module or not qualname:
        raise InvalidJob("%r has no importable dotted path (no __module__/__qualname__)" % (fn,))
    if qualname == "<lambda>" or "<lambda>" in qualname:
        raise InvalidJob("%r is a lambda; schedule a module-level function instead" % (fn,))
    if "<locals>" in qualname:
        raise InvalidJob(
            "%s.%s is a nested function or closure; a worker cannot import it. Move it to "
            "module level." % (module, qualname)
        )
    if inspect.ismethod(target):
        raise InvalidJob("%r is a bound method; schedule a module-level function" % (fn,))
    if module == "__main__":
        raise InvalidJob("%s is defined in __main__; a worker cannot import it" % qualname)
    return "%s.%s" % (module, qualname)


def check_schedulable(path: str) -> Callable[..., Any]:
    """Validate ``path`` for ``schedule()``: allowed, importable, a function."""
    if not isinstance(path, str) or not path or path.startswith(".") or " " in path:
        raise InvalidJob("%r is not a dotted path such as 'shop.tasks.close_order'" % (path,))
    if not is_allowed(path):
        raise InvalidJob(
            "%r is not in DELAYQ['ALLOWED_CALLABLES'] (allowed prefixes: %s)"
            % (path, ", ".join(allowed_prefixes()))
        )
    try:
        return _resolve(path)
    except (ImportError, AttributeError, TypeError) as exc:
        raise InvalidJob("cannot import %r: %s" % (path, exc)) from exc


def resolve(path: str) -> Callable[..., Any]:
    """The worker's lookup: raises ``PermissionError`` outside the allow-list."""
    if not is_allowed(path):
        raise PermissionError("%r is not in DELAYQ['ALLOWED_CALLABLES']" % (path,))
    return _resolve(path)


@cache
def _resolve(path: str) -> Callable[..., Any]:
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise ImportError("%r has no module part" % (path,))
    obj: Any
    try:
        obj = importlib.import_module(module_name)
        attrs = [attr]
    except ImportError:  # a class attribute path such as "mod.Class.method"
        module_name, _, cls = module_name.rpartition(".")
        if not module_name:
            raise
        obj = importlib.import_module(module_name)
        attrs = [cls, attr]
    for name in attrs:
        obj = getattr(obj, name)
    if type(obj).__name__ == "Task" and getattr(obj, "takes_context", False):
        from django_delayq.backends import task_callable  # passes a TaskContext first

        return task_callable(obj)
    func = getattr(obj, "func", None) if type(obj).__name__ == "Task" else obj
    func = func or obj
    if not callable(func) or inspect.isclass(func):
        raise TypeError("%r is not a function" % (path,))
    return func  # type: ignore[no-any-return]
