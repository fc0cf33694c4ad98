"""The package's shape is checked, not only described (docs/internals.md, "Layout").

* Layers and cycles: the import-linter contracts in ``.importlinter`` (run by
  ``make test``; here too, so that a plain ``pytest`` run catches an upward import).
* One owner of Redis: only ``django_delayq/engine`` imports the Redis client library
  (its exception types excepted) or touches an Engine's client.
* Small parts: no module over 450 lines, no function over 60.
* One file name per concept: no two modules share a file name.
* The tests mirror the package: a folder of tests/ is a layer of the package, or one of
  the suites that cut across the layers.
* The map stays true: every module is named in internals.md's feature table, every file
  it names exists, and every link between the docs lands on a heading.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "django_delayq"
ENGINE = PACKAGE / "engine"
# Attribute names that only a Redis client (or pipeline) has: reaching for them outside
# the engine builds keys or commands somewhere other than the one owner of Redis.
REDIS_ONLY_ATTRIBUTES = {"client", "pipeline", "pubsub", "execute_command", "register_script",
                         "evalsha", "scan_iter", "zadd", "zrange", "zrangebyscore", "zscore",
                         "hset", "hget", "hgetall", "hdel", "xadd", "xrange", "xrevrange",
                         "publish", "get_redis_connection"}
# The folders of tests/ that are no layer of the package: each tests every layer at once.
SUITES_ACROSS_LAYERS = {"cluster", "e2e", "reliability", "security", "tasks_conformance"}
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def modules() -> Iterator[Path]:
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            yield path


def test_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("import-linter is not installed: it is part of the dev dependencies")
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def redis_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text("utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += ["import %s" % a.name for a in node.names
                      if a.name == "redis" or a.name.startswith("redis.")
                      and not a.name.startswith("redis.exceptions")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top in ("redis", "django_redis") and node.module != "redis.exceptions":
                found.append("from %s import ..." % node.module)
        elif isinstance(node, ast.Attribute) and node.attr in REDIS_ONLY_ATTRIBUTES:
            found.append(".%s" % node.attr)
    return ["%s: %s" % (path.relative_to(ROOT), use) for use in found]


def test_only_the_engine_talks_to_redis() -> None:
    outside = [p for p in modules() if ENGINE not in p.parents]
    uses = [use for path in outside for use in redis_uses(path)]
    assert uses == []


def test_modules_and_functions_stay_small() -> None:
    too_big = []
    for path in modules():
        text = path.read_text("utf-8")
        name = str(path.relative_to(ROOT))
        if text.count("\n") > MAX_MODULE_LINES:
            too_big.append("%s: %d lines" % (name, text.count("\n")))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_big.append("%s: %s() %d lines" % (name, node.name, length))
    assert too_big == []


def test_one_file_name_per_concept() -> None:
    """No two modules share a file name (``__init__.py`` and migrations aside): a name
    says one thing wherever it is met (docs/internals.md, "Layout")."""
    seen: dict[str, list[str]] = {}
    for path in modules():
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(PACKAGE)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_the_tests_mirror_the_package() -> None:
    """The tests of ``django_delayq/<layer>/`` sit in ``tests/<layer>/``, those of the
    modules at the package's root in ``tests/`` itself (docs/testing.md)."""
    layers = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in (ROOT / "tests").iterdir()
               if p.is_dir() and (p / "__init__.py").exists()}
    assert folders - layers - SUITES_ACROSS_LAYERS == set()


def test_the_tests_left_out_of_a_later_pass_exist() -> None:
    """An entry of ``FIRST_PASS_ONLY`` or ``POSTGRES_NOT_DJANGO6`` (tests/conftest.py) that
    names nothing, after a rename, would leave nothing out without saying so."""
    from tests.conftest import FIRST_PASS_ONLY, POSTGRES_NOT_DJANGO6

    stale = []
    for entry in (*FIRST_PASS_ONLY, *POSTGRES_NOT_DJANGO6):
        path, _, name = entry.partition("::")
        found = [p for p in ROOT.glob(path + "*") if p.suffix == ".py" or p.is_dir()]
        if not found or (name and "def %s" % name not in found[0].read_text("utf-8")):
            stale.append(entry)
    assert stale == []


def feature_table() -> str:
    """The rows of internals.md's table of where a feature lives."""
    text = (ROOT / "docs" / "internals.md").read_text("utf-8")
    start = text.index("| feature | files |")
    return text[start:text.index("\n\n", start)]


def test_every_module_is_on_the_map() -> None:
    """Each module and Lua script (``__init__.py`` and migrations aside) is named, by its
    path under ``django_delayq/``, in the table of docs/internals.md ("Layout"), and
    every file the table names exists: under the package, at the repository's root
    (``bench/``), or, named alone, somewhere in the package."""
    table = feature_table()
    named = set(re.findall(r"`([\w./-]+\.(?:py|lua|html))`", table))
    files = {p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".lua")
             and "migrations" not in p.parts and p.name != "__init__.py"}
    missing = sorted(str(p.relative_to(PACKAGE)) for p in files
                     if str(p.relative_to(PACKAGE)) not in named)
    names = {p.name for p in PACKAGE.rglob("*")}
    absent = sorted(n for n in named if not (PACKAGE / n).exists()
                    and not (ROOT / n).exists() and ("/" in n or n not in names))
    assert (missing, absent) == ([], [])


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation other than ``-`` and
    ``_`` dropped, each space a ``-``."""
    text = re.sub(r"`|\*\*|\[([^]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_links_between_the_docs_land_on_a_heading() -> None:
    """A link ``page.md#anchor`` (or ``#anchor``) between the Markdown files of the
    repository names a heading of that page: a renamed heading breaks no link silently."""
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    anchors: dict[Path, set[str]] = {}
    for page in pages:
        seen: dict[str, int] = {}
        found = set()
        fenced = False
        for line in page.read_text("utf-8").splitlines():
            fenced ^= line.startswith("```")
            if not fenced and re.match(r"#{1,6} ", line):
                anchor = github_anchor(line.lstrip("#"))
                found.add(anchor if anchor not in seen else "%s-%d" % (anchor, seen[anchor]))
                seen[anchor] = seen.get(anchor, 0) + 1
        anchors[page] = found
    broken = []
    for page in pages:
        for target, anchor in re.findall(r"\]\(([\w./-]*\.md|)#([^)\s]+)\)",
                                         page.read_text("utf-8")):
            linked = (page.parent / target).resolve() if target else page
            if linked in anchors and anchor not in anchors[linked]:
                broken.append("%s: %s#%s" % (page.relative_to(ROOT), target, anchor))
    assert broken == []
