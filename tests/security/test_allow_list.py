"""The allow-list of job functions as a trust boundary, tested from the attacker's side.

An attacker who can write to the database or to Redis chooses the dotted path a worker
runs. Every path below reaches code that is not a job (attribute traversal, special
names, classes and methods, lambdas, partials, builtins, re-exports). Each is refused
by ``schedule()`` with ``InvalidJob`` naming the path and why, and, forged straight into
an audit row and Redis, ends ``dead`` ("not allowed: <why>") in a real worker (in this
process, and as a ``delayq_worker`` subprocess) without running, while a healthy job of
the same run succeeds. ``tests.jobs_attack`` is listed in these tests' allow-list, so the
refusals come from the path rules, not from the list.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

import django_delayq.contrib
from django_delayq import schedule
from django_delayq.core import api, ids, registry
from django_delayq.core.connection import get_engine
from django_delayq.engine import NewJob
from django_delayq.exceptions import InvalidJob
from django_delayq.models import Job, JobStatus
from tests import jobs_attack
from tests.helpers import ALLOWED, burst, wait_until

NOT_LISTED = "is not in DELAYQ['ALLOWED_CALLABLES']"

# (forged path, why it is refused)
REFUSED = [
    # attribute traversal through what a listed module imported
    ("tests.jobs_attack.os.system", "module 'tests.jobs_attack.os' " + NOT_LISTED),
    ("tests.jobs_attack.subprocess.getoutput", "module 'tests.jobs_attack.subprocess' "),
    ("tests.jobs_attack.importlib.import_module", "module 'tests.jobs_attack.importlib' "),
    ("tests.jobs.os.system", "module 'tests.jobs.os' " + NOT_LISTED),
    # special and private names
    ("tests.jobs_attack.__builtins__.get", "'__builtins__' starts with '_'"),
    ("tests.jobs_attack.__loader__.get_data", "'__loader__' starts with '_'"),
    ("tests.jobs_attack.honest.__globals__", "'__globals__' starts with '_'"),
    ("tests.jobs_attack.Bait.__init__", "'__init__' starts with '_'"),
    ("tests.jobs_attack.Bait.__subclasses__", "'__subclasses__' starts with '_'"),
    ("tests.jobs_attack._private", "'_private' starts with '_'"),
    # classes and their methods
    ("tests.jobs_attack.Bait", "a class, not a function"),
    ("tests.jobs_attack.Bait.static", "module 'tests.jobs_attack.Bait' " + NOT_LISTED),
    ("tests.jobs_attack.Bait.method", "module 'tests.jobs_attack.Bait' " + NOT_LISTED),
    ("tests.jobs_attack.BaitConfig", "a class, not a function"),
    ("tests.jobs_attack.BaitConfig.create", "module 'tests.jobs_attack.BaitConfig' "),
    # callables that are not plain functions
    ("tests.jobs_attack.shout", "defined as tests.jobs_attack.<lambda>"),
    ("tests.jobs_attack.run_shell", "a partial object, not a function"),
    ("tests.jobs_attack.system", "a builtin_function_or_method object, not a function"),
    ("tests.jobs_attack.os", "a module, not a function"),
    # re-exports and aliases
    ("tests.jobs_attack.getoutput", "defined as subprocess.getoutput"),
    ("tests.jobs_attack.import_module", "defined as importlib.import_module"),
    ("tests.jobs_attack.add", "defined as tests.jobs.add"),
    ("tests.jobs_attack.alias", "defined as tests.jobs_attack.honest"),
    # modules that are not listed
    ("os.system", "module 'os' " + NOT_LISTED),
    ("builtins.eval", "module 'builtins' " + NOT_LISTED),
    ("django_delayq.contrib.http.post_json", "module 'django_delayq.contrib.http' "),
    ("django_delayq.contrib.http.logging.basicConfig", "module 'django_delayq.contrib.http."),
    # not a dotted path of identifiers
    ("tests.jobs_attack.honest ", "'honest ' is not an ASCII identifier"),
    ("tests.jobs_attack..honest", "'' is not an ASCII identifier"),
    ("tests.jobs_attack.h\u00f3nest", "is not an ASCII identifier"),
    ("tests.jobs_attack.honest\n", "is not an ASCII identifier"),
    ("tests.jobs_attack.class", "'class' is a Python keyword"),
    ("honest", "has no module part"),
]
TOO_LONG = ("tests.jobs_attack." + "h" * 250, "longer than 255 characters")


def forge(path: str, *args: Any, **kwargs: Any) -> str:
    """An audit row written straight through the ORM and its id put in Redis, due now:
    what an attacker with database and Redis access would do, bypassing ``schedule()``."""
    row = Job.objects.create(id=ids.new_id(), queue="default", callable_path=path,
                             args=list(args), kwargs=kwargs, run_at=timezone.now(),
                             max_attempts=3, backoff=[0, 0])
    get_engine().enqueue("default", [NewJob(id=row.id)])
    return row.id


NOT_ALLOWED = "django_delayq.core.registry.NotAllowed"


def assert_refused_dead(job_id: str, why: str) -> None:
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.attempts) == (JobStatus.DEAD, 1), (row.callable_path, row.last_error)
    assert row.error_type == NOT_ALLOWED, (row.error_type, row.last_error)
    assert row.last_error.startswith("not allowed: %r" % row.callable_path), row.last_error
    assert why in row.last_error, (why, row.last_error)


# -- schedule() ------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("path, why", [*REFUSED, TOO_LONG])
def test_schedule_refuses_the_path_naming_it_and_why(cfg, path, why) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob) as info:
        schedule(path, "touch /tmp/never")
    assert repr(path) in str(info.value) and why in str(info.value)
    with pytest.raises(registry.NotAllowed, match=re.escape(why)):  # the worker's lookup
        registry.resolve(path)
    assert Job.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("fn, why", [
    (jobs_attack.shout, "is a lambda"),
    (jobs_attack.run_shell, "no importable dotted path"),
    (jobs_attack.Bait, "a class, not a function"),
    (jobs_attack.Bait.static, "module 'tests.jobs_attack.Bait' " + NOT_LISTED),
    (jobs_attack.Bait().method, "is a bound method"),
    (jobs_attack.BaitConfig.create, "is a bound method"),
    (jobs_attack.getoutput, "module 'subprocess' " + NOT_LISTED),
    (jobs_attack.system, NOT_LISTED),  # os.system is posix.system (or nt.system)
])
def test_schedule_refuses_objects_that_are_not_job_functions(cfg, fn, why) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidJob, match=re.escape(why)):
        schedule(fn, "touch /tmp/never")
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_plain_functions_of_a_listed_module_are_accepted(cfg) -> None:  # type: ignore[no-untyped-def]
    assert schedule("tests.jobs_attack.honest", "a", delay=3600).job.callable_path == \
        "tests.jobs_attack.honest"
    # A function object is scheduled by the path of its own definition.
    assert schedule(jobs_attack.alias, "b", delay=3600).job.callable_path == \
        "tests.jobs_attack.honest"
    assert schedule(jobs_attack.add, 1, 2, delay=3600).job.callable_path == "tests.jobs.add"
    assert registry.resolve("tests.jobs_attack.honest") is jobs_attack.honest
    assert registry.resolve("tests.jobs_attack.atomic_honest")("x") == "atomic:x"


@pytest.mark.django_db
def test_contrib_jobs_are_opt_in(cfg) -> None:  # type: ignore[no-untyped-def]
    path = "django_delayq.contrib.http.post_json"
    with pytest.raises(InvalidJob, match="module 'django_delayq.contrib.http' is not in"):
        schedule(path, "http://127.0.0.1:1/", delay=3600)
    cfg.DELAYQ = {**cfg.DELAYQ, "ALLOWED_CALLABLES": [*ALLOWED, "django_delayq.contrib.http"]}
    assert schedule(path, "http://127.0.0.1:1/", delay=3600).job.callable_path == path
    # Listing the module allows its functions, never what they import.
    for forged, why in [
        ("django_delayq.contrib.http.logging.basicConfig", "module 'django_delayq.contrib"
                                                           ".http.logging' is not in"),
        ("django_delayq.contrib.http.urllib.request.urlopen", "is not in"),
        ("django_delayq.contrib.http.current_job", "defined as django_delayq.core.context."),
        ("django_delayq.contrib.__path__.append", "'__path__' starts with '_'"),
    ]:
        with pytest.raises(InvalidJob, match=re.escape(why)):
            schedule(forged, delay=3600)


@pytest.mark.django_db
@pytest.mark.parametrize("allowed", [None, []])
def test_unset_or_empty_allow_list_refuses_everything(cfg, allowed) -> None:  # type: ignore[no-untyped-def]
    cfg.DELAYQ = {**cfg.DELAYQ, "ALLOWED_CALLABLES": allowed}
    for path in ("tests.jobs.noop", "tests.jobs_attack.honest",
                 "django_delayq.contrib.http.post_json",
                 "django_delayq.contrib.http.logging.basicConfig"):
        with pytest.raises(InvalidJob, match=re.escape("ALLOWED_CALLABLES'] is empty")):
            schedule(path)
        assert not registry.is_allowed(path)
    with pytest.raises(InvalidJob, match="'__path__' starts with '_'"):
        schedule("django_delayq.contrib.__path__.append", "/tmp")
    assert Job.objects.count() == 0


def test_only_successful_resolutions_are_cached(cfg) -> None:  # type: ignore[no-untyped-def]
    registry.reset()
    assert registry.resolve("tests.jobs_attack.honest") is jobs_attack.honest
    assert registry._resolve.cache_info().currsize == 1
    for path, _why in REFUSED:
        for _ in range(2):
            with pytest.raises(registry.NotAllowed):
                registry.resolve(path)
    assert registry._resolve.cache_info().currsize == 1
    # The list is read before the cache: a module taken off the list is refused at once.
    cfg.DELAYQ = {**cfg.DELAYQ, "ALLOWED_CALLABLES": ["tests.jobs"]}
    with pytest.raises(registry.NotAllowed, match="module 'tests.jobs_attack' is not in"):
        registry.resolve("tests.jobs_attack.honest")
    registry.reset()
    assert registry._resolve.cache_info().currsize == 0


# -- a real worker in this process ------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_forged_rows_end_dead_without_running_and_the_worker_goes_on(cfg, tmp_path) -> None:  # type: ignore[no-untyped-def]
    forged = {}
    for n, (path, why) in enumerate(REFUSED):
        forged[forge(path, "touch %s" % (tmp_path / ("pwned-%d" % n)))] = why
    # A row scheduled honestly, then tampered with before it runs.
    tampered = schedule("tests.jobs_attack.honest", "t", delay=3600)
    Job.objects.filter(pk=tampered.id).update(callable_path="tests.jobs_attack.os.system",
                                              args=["touch %s" % (tmp_path / "tampered")])
    get_engine().reschedule("default", tampered.id, delay_ms=0)
    forged[tampered.id] = "module 'tests.jobs_attack.os' " + NOT_LISTED
    healthy = schedule("tests.jobs_attack.honest", "healthy")

    assert burst() == 0
    for job_id, why in forged.items():
        assert_refused_dead(job_id, why)
        assert get_engine().inspect("default", job_id).place == "dead"
    assert (healthy.status, healthy.job.result) == (JobStatus.SUCCEEDED, "honest:healthy")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no command ran


@pytest.mark.django_db(transaction=True)
def test_refused_paths_import_nothing(cfg, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A module planted on sys.path (it writes a file when imported) stays unimported
    whatever forged path points at it, even once it is listed, until a valid path names it."""
    name = "delayq_planted_%s" % ids.new_id().lower()
    imported, ran = tmp_path / "imported", tmp_path / "ran"
    plant = tmp_path / "site"
    plant.mkdir()
    (plant / ("%s.py" % name)).write_text(
        "import pathlib\n"
        "pathlib.Path(%r).write_text('imported')\n\n"
        "def run():\n"
        "    pathlib.Path(%r).write_text('ran')\n" % (str(imported), str(ran)))
    monkeypatch.syspath_prepend(str(plant))
    try:
        refused = {
            forge("%s.run" % name): "module %r %s" % (name, NOT_LISTED),
            forge("tests.jobs_attack.%s.run" % name): "module 'tests.jobs_attack.%s' " % name,
            forge("tests.jobs_attack.import_module", name): "defined as importlib.import_module",
            forge("tests.jobs_attack.importlib.import_module", name): "tests.jobs_attack.importlib",
            forge("tests.jobs_attack.BaitConfig.create", name): "tests.jobs_attack.BaitConfig",
        }
        healthy = schedule("tests.jobs_attack.honest", "healthy")
        assert burst() == 0
        for job_id, why in refused.items():
            assert_refused_dead(job_id, why)
        assert healthy.status == JobStatus.SUCCEEDED
        assert name not in sys.modules and not imported.exists()

        # Listed, but reached through special names: refused before the import.
        cfg.DELAYQ = {**cfg.DELAYQ, "ALLOWED_CALLABLES": [*ALLOWED, name]}
        refused = {
            forge("%s.__loader__.get_data" % name, "/etc/passwd"): "'__loader__' starts with",
            forge("%s.run.__globals__" % name): "'__globals__' starts with '_'",
            forge("%s.run.__call__" % name): "'__call__' starts with '_'",
        }
        assert burst() == 0
        for job_id, why in refused.items():
            assert_refused_dead(job_id, why)
        assert name not in sys.modules and not imported.exists() and not ran.exists()

        # The control: a valid path imports it and runs (so the checks above can fail).
        listed = schedule("%s.run" % name)
        assert burst() == 0
        assert listed.status == JobStatus.SUCCEEDED
        assert name in sys.modules and imported.exists() and ran.exists()
    finally:
        sys.modules.pop(name, None)


@pytest.mark.django_db(transaction=True)
def test_empty_allow_list_runs_no_forged_contrib_job(cfg, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg.DELAYQ = {**cfg.DELAYQ, "ALLOWED_CALLABLES": []}
    log = tmp_path / "basic.log"
    path_before = list(django_delayq.contrib.__path__)
    forged = {
        forge("django_delayq.contrib.http.logging.basicConfig", filename=str(log),
              force=True): "ALLOWED_CALLABLES'] is empty",
        forge("django_delayq.contrib.__path__.append", str(tmp_path)): "'__path__' starts",
        forge("django_delayq.contrib.http.post_json", "http://127.0.0.1:1/"): "is empty",
        forge("tests.jobs.noop"): "ALLOWED_CALLABLES'] is empty",
    }
    assert burst() == 0
    for job_id, why in forged.items():
        assert_refused_dead(job_id, why)
    assert not log.exists() and list(django_delayq.contrib.__path__) == path_before


# -- re-running a row: api.requeue and the admin actions --------------------------------

@pytest.mark.django_db(transaction=True)
def test_requeue_and_admin_actions_refuse_a_tampered_row(cfg, admin_client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "pwned"
    dead = forge("tests.jobs_attack.os.system", "touch %s" % marker)
    assert burst() == 0
    assert_refused_dead(dead, NOT_LISTED)
    with pytest.raises(InvalidJob, match=re.escape("'tests.jobs_attack.os.system'")):
        api.requeue(dead)
    assert get_engine().inspect("default", dead).place == "dead"

    live = schedule("tests.jobs_attack.honest", "later", delay=3600)
    Job.objects.filter(pk=live.id).update(callable_path="tests.jobs_attack.system",
                                          args=["touch %s" % marker])
    run_at = live.job.run_at
    for action, job_id in (("requeue_jobs", dead), ("run_jobs_now", live.id)):
        response = admin_client.post(reverse("admin:django_delayq_job_changelist"), {
            "action": action, "_selected_action": [job_id], "index": "0"}, follow=True)
        messages = [str(m) for m in response.context["messages"]]
        assert messages[0] == "1 not allowed.", messages
        assert "%s: %r" % (job_id, Job.objects.get(pk=job_id).callable_path) in messages[1]
    assert Job.objects.get(pk=dead).status == JobStatus.DEAD
    assert live.job.run_at == run_at and get_engine().inspect("default", live.id).place == \
        "pending"
    assert burst() == 0 and not marker.exists()


# -- a real delayq_worker subprocess ----------------------------------------------------

SHELL_PATHS = [
    "tests.jobs_attack.os.system",
    "tests.jobs.os.system",
    "tests.jobs_attack.system",
    "tests.jobs_attack.shout",
    "tests.jobs_attack.run_shell",
    "tests.jobs_attack.getoutput",
    "tests.jobs_attack.subprocess.getoutput",
    "tests.jobs_attack.Bait.static",
    "tests.jobs_attack._private",
]


@pytest.mark.django_db(transaction=True)
def test_delayq_worker_subprocess_runs_no_forged_shell_command(cfg, start_worker,  # type: ignore[no-untyped-def]
                                                                tmp_path) -> None:
    markers: dict[str, Path] = {}
    for n, path in enumerate(SHELL_PATHS):
        marker = tmp_path / ("pwned-%d" % n)
        markers[forge(path, "touch %s" % marker)] = marker
    healthy = schedule("tests.jobs_attack.honest", "subprocess")
    proc = start_worker("--burst", "--concurrency", "2")
    assert proc.wait(120) == 0
    wait_until(lambda: healthy.status == JobStatus.SUCCEEDED)
    assert healthy.job.result == "honest:subprocess"
    for job_id, marker in markers.items():
        row = Job.objects.get(pk=job_id)
        assert (row.status, row.error_type) == (JobStatus.DEAD, NOT_ALLOWED), (
            row.callable_path, row.last_error)
        assert not marker.exists(), row.callable_path


def test_lookups_for_task_results_never_run_a_modules_getattr(settings) -> None:  # type: ignore[no-untyped-def]
    from django_delayq import tasks_results

    settings.DELAYQ = {**settings.DELAYQ, "ALLOWED_CALLABLES": ["tests.jobs_attack"]}
    from tests import jobs_attack

    jobs_attack.GETATTR_CALLS.clear()
    assert tasks_results.task_at("tests.jobs_attack.lazy_thing") is None
    with pytest.raises(AttributeError):
        registry.job_object("tests.jobs_attack.lazy_thing")
    assert jobs_attack.GETATTR_CALLS == []



def test_the_tasks_lookup_of_a_module_that_fails_at_import_is_none(settings) -> None:  # type: ignore[no-untyped-def]
    """The Tasks backend's signal receivers ask ``task_at`` on every attempt: a listed
    module whose import raises (not ImportError) is no Task here, not a receiver's error."""
    from django_delayq import tasks_results

    settings.DELAYQ = {**settings.DELAYQ, "ALLOWED_CALLABLES": ["tests.jobs_broken"]}
    assert tasks_results.task_at("tests.jobs_broken.anything") is None
