"""Print the package's shape: code lines, the longest import chain, imports inside
functions, module file names used more than once, the share of bare ``Any`` parameters,
the job options spelled in more than three modules (``option_spellings``); and the test
files by the folder of tests/ they sit in (a layer of the package, or a suite across the
layers).

``make shape`` runs it; docs/internals.md ("Shape") keeps the last figures. Scope:
django_delayq/ without migrations/; the line counts also leave out spark/.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "django_delayq"
TESTS = PACKAGE.parent / "tests"
PRAGMA = re.compile(r"#\s*(noqa|type:\s*ignore|pragma)\b[^#]*$")


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def docstring_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                lines.update(range(body[0].lineno, (body[0].end_lineno or 0) + 1))
    return lines


def comments(source: str) -> dict[int, str]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.start[0]: t.string for t in tokens if t.type == tokenize.COMMENT}


def python_lines(source: str) -> tuple[int, int]:
    """(code lines, non-blank lines): code leaves out comments and docstrings."""
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENDMARKER}
    code: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            code.update(range(tok.start[0], tok.end[0] + 1))
    code -= docstring_lines(ast.parse(source))
    return len(code), sum(1 for line in source.splitlines() if line.strip())


def lua_lines(source: str) -> tuple[int, int]:
    """(code lines, non-blank lines); ``--@include`` lines are code, other ``--`` comments
    and ``--[[ ]]`` blocks are not."""
    source = re.sub(r"--\[(=*)\[.*?\]\1\]", lambda m: "\n" * m.group().count("\n"), source,
                    flags=re.S)
    code = 0
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("--@") or stripped and not stripped.startswith("--"):
            code += 1
    return code, sum(1 for line in source.splitlines() if line.strip())


def line_counts() -> tuple[int, int, Counter[str]]:
    """(code lines, lines with comments and docstrings, code lines by folder of the
    package: "root" for its top-level modules)."""
    code = total = 0
    by_folder: Counter[str] = Counter()
    for path in sorted(PACKAGE.rglob("*")):
        parts = path.relative_to(PACKAGE).parts
        if "migrations" in path.parts or "spark" in parts:
            continue
        counter = {".py": python_lines, ".lua": lua_lines}.get(path.suffix)
        if counter:
            c, t = counter(path.read_text("utf-8"))
            code, total = code + c, total + t
            by_folder[parts[0] if len(parts) > 1 else "root"] += c
    return code, total, by_folder


def test_files() -> tuple[Counter[str], Counter[str]]:
    """Test files of tests/ by folder: (of a layer of the package, with "root" for the
    modules at the package's root; of a suite across the layers)."""
    layers = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    mirror: Counter[str] = Counter()
    across: Counter[str] = Counter()
    for path in TESTS.rglob("test_*.py"):
        folder = path.relative_to(TESTS).parts[0] if path.parent != TESTS else "root"
        (mirror if folder in layers or folder == "root" else across)[folder] += 1
    return mirror, across


def top_level_imports(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    """Modules named by the module-level imports (``if TYPE_CHECKING:`` left out)."""
    found: set[str] = set()
    base = name.split(".") if is_package else name.split(".")[:-1]

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                pkg = ".".join(base[:len(base) - node.level + 1] if node.level else [])
                mod = ".".join(p for p in (pkg, node.module or "") if p)
                # "from package import module" imports that module (the package is
                # already imported by then); any other name comes from ``mod`` itself.
                found.update("%s.%s" % (mod, a.name) for a in node.names)
                found.add(mod + ".*")
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body + node.orelse + node.finalbody
                      + [s for h in node.handlers for s in h.body])

    visit(tree.body)
    return found


def resolve(name: str, deps: set[str], graph: dict[str, set[str]]) -> str:
    """The module of ``name`` ("" if not one of ours): ``mod.*`` stands for ``mod`` when
    one of the names imported from it is not a module."""
    if name.endswith(".*"):
        mod = name[:-2]
        names = {d for d in deps if d.startswith(mod + ".") and not d.endswith(".*")
                 and d.count(".") == mod.count(".") + 1}
        return mod if mod in graph and any(d not in graph for d in names) else ""
    return name if name in graph else ""


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    best: dict[str, list[str]] = {}

    def chain(mod: str, path: frozenset[str]) -> list[str]:
        if mod not in best:
            tails = [chain(m, path | {m}) for m in sorted(graph[mod]) if m not in path]
            best[mod] = [mod, *max(tails, key=len, default=[])]
        return best[mod]

    return max((chain(m, frozenset({m})) for m in sorted(graph)), key=len)


# -- where a job option is spelled (docs/internals.md, "Shape") ---------------------------

# The modules that store, send, run, show or export jobs already made, never a caller's
# options: their spellings of an option's name are a row's columns or values read back.
NOT_OPTIONS = (
    "migrations/", "engine/", "worker/", "admin/", "observe/", "management/",  # layers
    "models.py",  # the columns
    "tasks_results.py", "testing.py",  # a stored row as Django's TaskResult; run in tests
    "core/payloads.py", "core/reconcile.py", "core/reconcile_state.py",  # rows read back
    "core/queues.py", "core/results.py", "core/context.py",
)
# spark/: only schedule_dataframe's modules make jobs (the others export stored rows)
SPARK_JOBS = ("spark/dataframe_jobs.py", "spark/arrow_jobs.py", "spark/column_rows.py",
              "spark/sink.py")


def option_names() -> tuple[str, ...]:
    """``JobOptions``' fields, read from core/options.py's source (no Django needed)."""
    tree = ast.parse((PACKAGE / "core" / "options.py").read_text("utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "JobOptions")
    return tuple(n.target.id for n in cls.body
                 if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))


def spelled(tree: ast.Module, names: tuple[str, ...]) -> set[str]:
    """The options ``tree`` spells: as a string literal (either case: the Tasks backend's
    OPTIONS keys are upper case), a class's field, a parameter of a function whose
    parameters name two options or more, a keyword of a call whose keywords do."""
    words: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            words += [node.value, node.value.lower()]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            words.append(node.target.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            a = node.args
            given = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            words += given if len(set(given) & set(names)) >= 2 else []
        elif isinstance(node, ast.Call):
            given = [k.arg for k in node.keywords if k.arg]
            words += given if len(set(given) & set(names)) >= 2 else []
    return set(words) & set(names)


def option_spellings() -> dict[str, list[str]]:
    """Each job option -> the modules spelling it (``spelled``), but ``NOT_OPTIONS``."""
    names = option_names()
    found: dict[str, list[str]] = {name: [] for name in names}
    for path in modules():
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(NOT_OPTIONS) or rel.startswith("spark/") and rel not in SPARK_JOBS:
            continue
        for name in spelled(ast.parse(path.read_text("utf-8")), names):
            found[name].append(rel.removesuffix(".py"))
    return found


def is_reason(comment: str | None) -> bool:
    return bool(comment) and not PRAGMA.fullmatch(comment or "")


def main() -> int:
    graph: dict[str, set[str]] = {}
    inner = with_reason = params = bare_any = 0
    for path in modules():
        source = path.read_text("utf-8")
        tree, notes = ast.parse(source), comments(source)
        name = module_name(path)
        graph[name] = top_level_imports(tree, name, path.name == "__init__.py")
        seen: set[int] = set()
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = func.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
            for arg in (a for a in every if a is not None):
                params += 1
                bare_any += arg.annotation is not None \
                    and ast.unparse(arg.annotation) in ("Any", "typing.Any")
            for node in ast.walk(func):  # a nested function's imports counted once
                if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in seen:
                    seen.add(id(node))
                    inner += 1
                    with_reason += any(is_reason(notes.get(n)) for n in
                                       range(node.lineno, (node.end_lineno or 0) + 1))
    graph = {m: {resolve(d, deps, graph) for d in deps} - {m, ""} for m, deps in graph.items()}
    code, total, by_folder = line_counts()
    chain = longest_chain(graph)
    names = Counter(p.name for p in modules() if p.name != "__init__.py")
    shared = sorted((n for n, c in names.items() if c > 1), key=lambda n: (-names[n], n))
    print("code lines (Python + Lua, without spark/ and migrations/):")
    print("  without comments, docstrings, blank lines  %6d" % code)
    print("  with comments and docstrings               %6d" % total)
    print("  by folder   %s" % ", ".join("%s %d" % kv for kv in by_folder.most_common()))
    print("longest import chain (module-level)          %6d modules" % len(chain))
    print("  " + " > ".join(m.removeprefix("django_delayq.") for m in chain))
    print("imports inside functions                     %6d (%d with a reason on the line)"
          % (inner, with_reason))
    print("module file names used more than once        %6d" % len(shared))
    if shared:
        print("  " + ", ".join("%s x%d" % (n, names[n]) for n in shared))
    print("bare Any parameters                          %5.1f%% (%d of %d parameters)"
          % (100 * bare_any / max(params, 1), bare_any, params))
    spellings = option_spellings()
    over = sorted((n for n, m in spellings.items() if len(m) > 3),
                  key=lambda n: (-len(spellings[n]), n))
    print("job options spelled in more than 3 modules   %6d (of %d)" % (len(over), len(spellings)))
    for name in over:
        print("  %s %d: %s" % (name, len(spellings[name]), ", ".join(spellings[name])))
    mirror, across = test_files()
    print("test files                                   %6d (%d of a layer, %d across)"
          % (sum(mirror.values()) + sum(across.values()), sum(mirror.values()),
             sum(across.values())))
    for label, counts in (("of a layer", mirror), ("across", across)):
        print("  %-11s %s" % (label, ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
