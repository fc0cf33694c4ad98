"""Django's own ``tests/tasks`` against the DelayQ backend (``make test``: tasks-conformance).

Run with the interpreter of the Django 6.x environment (``.venv-dj6/bin/python
scripts/tasks_conformance.py [pytest args]``). The tests come from the source
distribution of the Django release installed there, never from this repository:
``pip download --no-binary :all: --no-deps django==<version>`` into a cache beside that
environment (``<venv>/tasks-conformance/``), the archive's sha256 checked against the
value pinned below for that version, then ``tests/tasks/`` extracted and run with
pytest and the adaptation layer ``tests/tasks_conformance/`` (settings, and a plugin that
runs a worker where Django's tests expect an immediate run and skips, by name and with
the reason, what cannot pass). A Django version without a pinned hash is an error: pin
it after checking the archive.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

import django

ROOT = Path(__file__).resolve().parents[1]
PINNED = {  # Django version -> sha256 of its source distribution (django-<v>.tar.gz)
    "6.1.3": "b5d2d9e35295065d13b1927b3f19a59bd119f737aa6299def14ccca1ae3c8c0d",
}


def sdist(version: str, cache: Path) -> Path:
    archive = cache / ("django-%s.tar.gz" % version)
    if not archive.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:",
                        "--no-deps", "django==%s" % version, "-d", str(cache)], check=True)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != PINNED[version]:
        archive.unlink()
        sys.exit("%s: sha256 %s, pinned %s" % (archive.name, digest, PINNED[version]))
    return archive


def extract_tests(archive: Path, version: str, into: Path) -> Path:
    """``tests/tasks/`` of the archive, as ``<into>/tasks`` (Django names it ``tasks``)."""
    prefix = "django-%s/tests/tasks/" % version
    target = into / "tasks"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        if not members:
            sys.exit("%s has no %s" % (archive.name, prefix))
        for member in members:
            dest = target / member.name[len(prefix):]
            dest.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            dest.write_bytes(source.read())
    return target


def main(argv: list[str]) -> int:
    version = django.get_version()
    if version not in PINNED:
        sys.exit("Django %s has no pinned sdist sha256 in %s" % (version, __file__))
    cache = Path(sys.prefix) / "tasks-conformance"
    cache.mkdir(exist_ok=True)
    tests_dir = cache / ("django-%s-tests" % version)
    if not (tests_dir / "tasks" / "tasks.py").exists():
        extract_tests(sdist(version, cache), version, tests_dir)
    command = [sys.executable, "-m", "pytest", "-c", "/dev/null", "--rootdir", str(tests_dir),
               "-p", "tests.tasks_conformance.plugin", "--ds", "tests.tasks_conformance.settings",
               "-q", "-rs", str(tests_dir / "tasks"), *argv]
    print("Django %s tests/tasks (sha256-pinned sdist) against DelayQBackend" % version)
    return subprocess.run(command, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
