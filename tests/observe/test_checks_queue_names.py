"""One rule for a queue name, wherever one is given: ``DELAYQ["QUEUES"]``,
``DEFAULT_QUEUE``, the keys of ``QUEUE_OPTIONS``, a queue a Tasks backend with
``QUEUES: []`` lets through (``schedule(..., any_queue=True)``) and ``--queues``. A name
no worker can be started for (``--queues`` splits on commas and strips spaces), or one
named like a shard of another queue (``q#1``, engine/shard_map.py), is refused by
``manage.py check`` and ``get_settings()`` naming it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_delayq.core import conf, validation
from django_delayq.observe import checks

NOT_SERVABLE = ["a,b", " lead", "tail ", "a\tb", "x#2", "{x}", "", "q" * 101]


def _errors(settings, **delayq):  # type: ignore[no-untyped-def]
    settings.DELAYQ = {"QUEUES": ["default"], "ALLOWED_CALLABLES": ["tests.jobs"], **delayq}
    return checks.check_settings()


def _refused(settings, key, **delayq):  # type: ignore[no-untyped-def]
    errors = _errors(settings, **delayq)
    assert [e.id for e in errors] == [checks.ERROR_IDS[key]], errors
    with pytest.raises(ImproperlyConfigured) as raised:
        conf.get_settings()
    assert errors[0].msg in str(raised.value)
    return errors[0].msg


@pytest.mark.parametrize("name", NOT_SERVABLE)
def test_queues_refuses_a_name_no_worker_can_serve_naming_it(settings, name):
    msg = _refused(settings, "QUEUES", QUEUES=["default", name])
    assert repr(name) in msg and "without braces or commas" in msg


@pytest.mark.parametrize("name", NOT_SERVABLE)
def test_queue_options_refuses_such_a_name_as_a_key(settings, name):
    msg = _refused(settings, "QUEUE_OPTIONS", QUEUE_OPTIONS={name: {"timeout": 5}})
    assert "DELAYQ['QUEUE_OPTIONS'][%r]" % name in msg and "without braces or commas" in msg


def test_default_queue_names_the_bad_name(settings):
    [msg] = [m for key, m in conf.problems({"QUEUES": ["default"], "DEFAULT_QUEUE": " lead",
                                            "ALLOWED_CALLABLES": ["tests.jobs"]})
             if key == "DEFAULT_QUEUE"]
    assert "DELAYQ['DEFAULT_QUEUE'] ' lead' is not a queue name" in msg


def test_a_queue_listed_twice_is_refused_naming_it(settings):
    msg = _refused(settings, "QUEUES", QUEUES=["default", "emails", "default"])
    assert "lists 'default' twice" in msg


def test_good_names_pass_everywhere(settings):
    good = ["default", "a#b", "#1x", "emails-2", "a b", "x" * 100, "été"]
    assert _errors(settings, QUEUES=good, QUEUE_OPTIONS={q: {"timeout": 1} for q in good}) == []
    assert conf.get_settings().queues == tuple(good)
    assert [validation.check_queue(q, (), any_queue=True) for q in good] == good
