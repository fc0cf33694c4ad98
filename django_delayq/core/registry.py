"""Dotted path -> job function, through an allow-list of modules: a trust boundary.

Whoever can write an audit row (or put an envelope in Redis) chooses the path a
worker runs, so a path must reach nothing but the job functions the project listed.
A path is accepted only when all of this holds, checked in this order:

1. It is ``<module>.<name>``: ASCII identifiers joined by dots, at most ``MAX_PATH``
   characters, no segment starting with ``_`` (no ``__builtins__``, ``__init__``,
   ``__loader__``, no private names) and none a Python keyword.
2. ``<module>`` (everything before the last dot) is exactly one of the modules in
   ``DELAYQ["ALLOWED_CALLABLES"]``: an entry names one module, not a package prefix,
   so ``shop.tasks.os.system`` (module ``shop.tasks.os``) is refused. An unset or
   empty list allows nothing (``manage.py check`` reports it, ``delayq.E025``).
   Steps 1 and 2 look at the string only: nothing is imported for a refused path.
3. Exactly ``<module>`` is imported (never a shorter or longer prefix), and its
   namespace entry ``<name>`` (read from the module's ``__dict__``, so no module
   ``__getattr__`` runs) is a plain Python function, or a Django ``Task`` wrapping
   one, whose ``__module__`` and ``__qualname__`` are ``<module>`` and ``<name>``:
   it was defined at the top level of that module under that name. Classes and their
   methods, lambdas, ``functools.partial`` objects, builtins, modules, aliases, and
   functions imported from another module are refused (schedule a function by the
   path of the module that defines it).

``check_schedulable`` raises ``InvalidJob`` for any of these at ``schedule()``. The
worker's ``resolve`` raises ``NotAllowed`` (a ``PermissionError``: the runner ends the
job dead, "not allowed: ..."). A listed module that fails to import, or lacks the
name, raises ``ImportError`` / ``AttributeError`` instead (any error of the module's
own import passes through), which the worker's ``resolve_here`` raises as
``Unresolved``: the job is retried whatever its ``retry_on`` says, since a worker
running a newer deploy may have it. Only successful resolutions are cached
(``functools.cache`` keeps no exceptions); ``reset()`` clears the cache when the
settings change.
"""

from __future__ import annotations

import importlib
import inspect
import math
import types
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from django_delayq import compat
from django_delayq.core.conf import get_settings
from django_delayq.core.validation import name_problem
from django_delayq.exceptions import InvalidJob, Refused

EXAMPLE = "'shop.tasks.close_order'"


class NotAllowed(Refused):
    """A job path the allow-list refuses; the worker ends such a job dead."""


@cache
def allowed_modules() -> frozenset[str]:
    """The modules of ``DELAYQ["ALLOWED_CALLABLES"]``; empty when unset."""
    return frozenset(get_settings().allowed_callables or ())


def reset() -> None:
    for cached in (allowed_modules, _refusal, _job_object, _resolve, binder):
        cached.cache_clear()


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: object) -> None:
    if setting in ("DELAYQ", "INSTALLED_APPS"):
        reset()


_task_caller: Callable[[Any], Callable[..., Any]] | None = None


def set_task_caller(caller: Callable[[Any], Callable[..., Any]]) -> None:
    """How a Django ``Task`` is called: the Tasks backend registers it (it passes a
    ``TaskContext`` first when the task ``takes_context``, and checks the return value).
    A hook, so that this module never imports the surface above it."""
    global _task_caller  # noqa: PLW0603 - the Tasks backend's hook, one per process
    _task_caller = caller


def refusal(path: object) -> str | None:
    """Why ``path`` is refused before anything is imported (steps 1 and 2), or ``None``
    (the answer for a string kept for the settings' life: ``reset()`` clears it)."""
    return _refusal(path) if type(path) is str else _why_refused(path)


def _why_refused(path: object) -> str | None:
    why = name_problem(path, what="dotted path")
    if why or not isinstance(path, str):  # not a str: name_problem says so
        return "%r is not a job path such as %s: %s" % (path, EXAMPLE, why)
    module, _, name = path.rpartition(".")
    if not module:
        return "%r has no module part; use a path such as %s" % (path, EXAMPLE)
    allowed = allowed_modules()
    if not allowed:
        return ("%r: DELAYQ['ALLOWED_CALLABLES'] is empty, so no job may run; list the "
                "modules that define your job functions, e.g. ['shop.tasks']" % path)
    if module not in allowed:
        return ("%r: module %r is not in DELAYQ['ALLOWED_CALLABLES'] %s (a job path is a "
                "listed module and the name of a function defined in it)"
                % (path, module, sorted(allowed)))
    return None


_refusal = lru_cache(maxsize=1024)(_why_refused)  # bounded: a worker reads paths from rows


def is_allowed(path: str) -> bool:
    """Whether ``path`` passes the string checks (imports nothing)."""
    return refusal(path) is None


def path_of(fn: object) -> str:
    """The dotted path of a module-level function; refuses what a worker could not import."""
    if isinstance(fn, str):
        return fn
    if not callable(fn):
        raise InvalidJob("expected a function or a dotted path, got %r" % (fn,))
    target = _function(fn)
    module = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if not module or not qualname:
        raise InvalidJob("%r has no importable dotted path (no __module__/__qualname__)" % (fn,))
    if "<lambda>" in qualname:
        raise InvalidJob("%r is a lambda; schedule a module-level function instead" % (fn,))
    if "<locals>" in qualname:
        raise InvalidJob("%s.%s is a nested function or closure; a worker cannot import it. "
                         "Move it to module level." % (module, qualname))
    if inspect.ismethod(target):
        raise InvalidJob("%r is a bound method; schedule a module-level function" % (fn,))
    if module == "__main__":
        raise InvalidJob("%s is defined in __main__; a worker cannot import it" % qualname)
    return "%s.%s" % (module, qualname)


def check_schedulable(path: str) -> Callable[..., Any]:
    """Validate ``path`` for ``schedule()``: allowed, importable, a plain function."""
    try:
        return resolve(path)
    except NotAllowed as exc:
        raise InvalidJob(str(exc)) from exc
    except (ImportError, AttributeError) as exc:
        raise InvalidJob("cannot import %r: %s" % (path, exc)) from exc


def resolve(path: str) -> Callable[..., Any]:
    """The worker's lookup: ``NotAllowed`` for a refused path, before any import."""
    if why := refusal(path):
        raise NotAllowed(why)
    return _resolve(path)


class Unresolved(Exception):  # noqa: N818 - named for what happened, as NotAllowed
    """``resolve_here``: the job's function cannot be resolved on this worker (its
    ``__cause__`` says why: the listed module fails to import, or lacks the function). The
    job is retried, whatever its ``retry_on`` says (that is about the exceptions of the
    function itself): a worker running a newer deploy may have it."""


def resolve_here(path: str) -> Callable[..., Any]:
    """``resolve`` for a worker: ``NotAllowed`` as it raises it, any other failure (an
    ``ImportError``, ``AttributeError``, the module's own error) as ``Unresolved``."""
    try:
        return resolve(path)
    except NotAllowed:
        raise
    except Exception as exc:
        raise Unresolved("cannot resolve %r on this worker" % (path,)) from exc


def job_object(path: str) -> Any:
    """What ``path`` names: a job function, or a Django ``Task`` around one, read from the
    module's ``__dict__`` (no module ``__getattr__`` runs) after every check ``resolve``
    makes. ``NotAllowed``, ``ImportError`` or ``AttributeError`` otherwise."""
    if why := refusal(path):
        raise NotAllowed(why)
    return _job_object(path)


@cache
def _job_object(path: str) -> Any:
    """Import exactly the module part and check the one name (``path`` passed ``refusal``)."""
    module_name, _, name = path.rpartition(".")
    module = importlib.import_module(module_name)
    if module.__name__ != module_name:  # a module that replaced itself in sys.modules
        raise NotAllowed("%r: importing %r gave module %r" % (path, module_name, module.__name__))
    namespace = getattr(module, "__dict__", {})
    if name not in namespace:
        raise AttributeError("module %r has no function %r" % (module_name, name))
    obj = namespace[name]
    if why := _not_a_job_function(_function(obj), module_name, name):
        raise NotAllowed("%r: %s" % (path, why))
    return obj


@cache
def _resolve(path: str) -> Callable[..., Any]:
    obj = _job_object(path)
    func = _function(obj)
    if func is not obj and _task_caller is not None:
        return _task_caller(obj)  # the Tasks backend's call: context, JSON return value
    if func is not obj and getattr(obj, "takes_context", False):
        raise ImportError("%r takes a context, and the Django Tasks backend "
                          "(django_delayq.backends) is not loaded" % (path,))
    return func  # type: ignore[no-any-return]


def _not_a_job_function(func: object, module: str, name: str) -> str | None:
    """Why ``func`` (found as ``module.name``) is not a job function, or ``None``."""
    if inspect.isclass(func):
        return "a class, not a function; schedule a module-level function"
    if isinstance(func, types.ModuleType):
        return "a module, not a function"
    if not isinstance(func, types.FunctionType):
        return ("a %s object, not a function (builtins, functools.partial objects and other "
                "callables are never jobs)" % type(func).__name__)
    defined = "%s.%s" % (getattr(func, "__module__", None), getattr(func, "__qualname__", None))
    if defined != "%s.%s" % (module, name):
        return ("the function defined as %s, not a function defined in %r under that name "
                "(a lambda, an alias or an import from another module); schedule it by the "
                "path of its own definition" % (defined, module))
    return None


@cache
def binder(path: str) -> Binder | None:
    """The ``Binder`` of the signature the job at ``path`` is called with: its function's,
    or for a Django ``Task`` the wrapped function's without the ``TaskContext`` a
    ``takes_context`` task gets first (kept per path). ``None`` when Python cannot tell.
    ``path`` passed ``check_schedulable``."""
    obj = job_object(path)
    func = _function(obj)
    try:
        found = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    if func is not obj and obj.takes_context:
        found = found.replace(parameters=list(found.parameters.values())[1:])
    return Binder(path, found)


def _function(obj: object) -> Any:
    """The function a Django ``Task`` wraps (the Tasks framework installed), else ``obj``."""
    task = compat.tasks_base.Task if compat.tasks_base is not None else None
    return obj.func if task is not None and isinstance(obj, task) else obj


# -- the arguments against the function's signature ---------------------------------------

class Binder:
    """``bind`` for the jobs of one function (one kept per path: ``registry.binder``):
    positional arguments alone, for a signature whose parameters are positional (or
    ``*args``, ``**kwargs``, keyword-only ones with defaults), are checked by counting, as
    Python binds them; anything else binds."""

    def __init__(self, path: str, signature: inspect.Signature) -> None:
        self.path, self.signature = path, signature
        params = list(signature.parameters.values())
        kinds = {p.kind for p in params}
        self.anything = kinds == {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
        positional = [p for p in params if p.kind in _POSITIONAL]
        keyword_only = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
        required = sum(p.default is inspect.Parameter.empty for p in positional)
        most = math.inf if inspect.Parameter.VAR_POSITIONAL in kinds else len(positional)
        countable = all(p.default is not inspect.Parameter.empty for p in keyword_only)
        self.counts = (required, most) if countable else None
        # the names an argument can be given by (``refuse_options`` looks no further)
        self.keywords = frozenset(p.name for p in params if p.kind in _NAMED)

    def check(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        counted = self.counts is not None and not kwargs and (
            self.counts[0] <= len(args) <= self.counts[1])
        if not (self.anything or counted):
            bind(self.signature, self.path, args, kwargs)

    def refuse_options(self, names: list[str]) -> None:
        """``schedule(fn, ..., timeout=5)`` when ``fn`` itself takes ``timeout``: the value
        would silently become the job's option (``names``: those given) instead of the
        function's argument (the meaning it had before these options existed), so
        ``InvalidJob`` says how to pass either."""
        if clash := [n for n in names if n in self.keywords]:
            option = clash[0]
            raise InvalidJob(
                "%s takes an argument named %r, and schedule(..., %s=...) sets the job's "
                "option of that name, not the argument: pass the argument with "
                "job(fn).schedule(..., %s=...) (every keyword goes to the function) and the "
                "option with job(fn).using(%s=...)" % (self.path, option, option, option, option))


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def bind(signature: inspect.Signature, path: str, args: Sequence[object],
         kwargs: dict[str, Any]) -> None:
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidJob("the arguments do not match %s%s: %s"
                         % (path, _plain(signature), exc)) from None


def _plain(signature: inspect.Signature) -> str:
    """The parameters without annotations: ``(a, b=1, *args)``."""
    empty = inspect.Parameter.empty
    params = [p.replace(annotation=empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=params, return_annotation=empty))
