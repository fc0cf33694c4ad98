"""Functions that tests try (and fail) to schedule, a class-level one, and a job whose
keyword arguments are named like scheduling options."""

import importlib


class Holder:
    @staticmethod
    def static(x: int) -> int:
        return x

    def method(self) -> None:
        return None


def make_closure():  # type: ignore[no-untyped-def]
    def inner() -> None:
        return None

    return inner


not_a_function = 42


def named_like_options(delay: int, queue: str, key: str, at: str = "") -> dict[str, object]:
    """A job whose keyword arguments are named like scheduling options: returns them."""
    return {"delay": delay, "queue": queue, "key": key, "at": at}


def raise_value_error(message: str) -> None:
    """A job that fails with ``ValueError(message)``."""
    raise ValueError(message)


def schedules_in_a_transaction(n: int) -> int:
    """A job that schedules another inside a transaction of its own."""
    from django.db import transaction

    from django_delayq import schedule
    with transaction.atomic():
        schedule("tests.jobs.add", n, n)
    return n


def raise_permission_error(message: str) -> None:
    """A job whose own code meets a ``PermissionError`` (a file it may not open)."""
    raise PermissionError(13, message)


def stamp(path: str, tag: str) -> None:
    """Append ``tag``, the wall-clock time at entry and the pid (one line per start)."""
    import os
    import time

    started = time.time()
    with open(path, "a") as f:
        f.write("%s %.6f %d\n" % (tag, started, os.getpid()))


def hold(path: str, tag: str, seconds: float) -> None:
    """Run ``seconds``; append ``tag``, the wall-clock entry and exit times (one line)."""
    import time

    started = time.time()
    time.sleep(seconds)
    with open(path, "a") as f:
        f.write("%s %.6f %.6f\n" % (tag, started, time.time()))


def named_like_after(after: object = None) -> object:
    """A job whose keyword argument is named like the ``after`` option: returns it."""
    return after


def big_result(size: int) -> str:
    """A job returning a string of ``size`` characters (its JSON: ``size + 2`` bytes)."""
    return "x" * size


def takes_group(group: str = "") -> str:
    """A job whose keyword argument is named like the ``group`` option: returns it."""
    return group


def returns(kind: str) -> object:
    """A result hard to store: a NUL, the text of NUL's JSON escape, a huge integer."""
    return {"nul": "a\x00b", "escape": "a\\u0000b", "huge": 10**5000}[kind]


def exits() -> None:
    """A job raising ``SystemExit`` (a BaseException, not an Exception)."""
    raise SystemExit(3)


def imports_missing() -> None:
    """A job whose own code fails to import a module (``ModuleNotFoundError``)."""
    importlib.import_module("tests.no_module_of_this_name")
