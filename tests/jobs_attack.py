"""Bait for the allow-list tests (tests/security): everything an attacker who forges a
job path would reach for, in a module that those tests list in ALLOWED_CALLABLES, so
that every refusal comes from the path rules and not from the list.

Only ``honest`` and ``atomic_honest`` (behind a decorator that keeps its name) are
jobs. The rest must never run: the imported modules (reachable by attribute traversal),
functions and builtins imported from elsewhere, a private function, a class with
methods, an AppConfig, a lambda, a ``functools.partial`` and an alias. Importing this
module has no side effect.
"""

from __future__ import annotations

import functools
import importlib  # noqa: F401  (bait: tests.jobs_attack.importlib.import_module)
import os
import subprocess  # noqa: F401  (bait: tests.jobs_attack.subprocess.getoutput)
from importlib import import_module  # noqa: F401  (bait: a function of another module)
from os import system  # noqa: F401  (bait: a builtin)
from subprocess import getoutput  # noqa: F401  (bait: a plain function of another module)
from typing import Any

from django.apps import AppConfig
from django.db import transaction

from tests.jobs import add  # noqa: F401  (bait: a job, but tests.jobs defines it)


def honest(tag: str) -> str:
    """The one job of this module."""
    return "honest:%s" % tag


@transaction.atomic
def atomic_honest(tag: str) -> str:
    """A job behind a decorator that keeps its name (functools.wraps)."""
    return "atomic:%s" % tag


def _private(command: str) -> int:
    return os.system(command)


class Bait:
    """A class: neither it nor its methods are jobs."""

    def __init__(self, command: str = "") -> None:
        self.command = command

    def method(self) -> int:
        return os.system(self.command)

    @staticmethod
    def static(command: str) -> int:
        return os.system(command)


class BaitConfig(AppConfig):
    """Like ``apps.<AppConfig>.create``: a classmethod that imports what it is given."""

    name = "tests"
    label = "bait"


shout = lambda command: os.system(command)  # noqa: E731, PLW0108  (bait: a lambda)
run_shell: Any = functools.partial(os.system)  # bait: a partial object
alias = honest  # bait: one function under a second name

GETATTR_CALLS: list[str] = []


def __getattr__(name: str) -> object:  # bait: attribute code that must never run
    GETATTR_CALLS.append(name)
    raise AttributeError(name)
