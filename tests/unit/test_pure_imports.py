"""Guideline 1: pgfeed.pgoutput and pgfeed.assembler stay pure (no I/O, network or concurrency
libraries), checked by walking their imports with ``ast``, following first-party imports too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE_PACKAGES = ("service/pgfeed/pgoutput", "service/pgfeed/assembler", "service/pgfeed/decoding",
                 "service/pgfeed/types")
FORBIDDEN = ("psycopg", "asyncio", "sqlite3", "grpc", "fastapi", "socket", "threading")
# Type loading reuses psycopg's text loaders (psycopg.adapt: no connection): the row loader and
# the type registry (whose families declare loaders), and only those, may import psycopg. The
# other forbidden modules stay forbidden there too.
PSYCOPG_ALLOWED = ("service/pgfeed/decoding/values.py", "service/pgfeed/types/")
# Each top-level folder holds its package under its import name: import name -> the folder holding it.
# pgfeed_proto (clients/pgfeed_proto) is generated code and no unit of the house.
FIRST_PARTY = {"pgfeed": "service", "pgfeed_client": "clients", "pgfeed_spark": "spark_connector"}


def _modules() -> list[Path]:
    return sorted(p for pkg in PURE_PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _imports(path: Path) -> list[str]:
    """Absolute names of everything ``path`` imports (relative imports resolved)."""
    _folder, *parts = path.relative_to(ROOT).parts[:-1]
    return _imports_of(path.read_text(), ".".join(parts))


def _imports_of(source: str, package: str) -> list[str]:
    tree = ast.parse(source)
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.append(mod)
            names.extend(f"{mod}.{alias.name}" for alias in node.names)  # may be submodules
    return names


def _first_party_file(name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] not in FIRST_PARTY:
        return None
    base = ROOT / FIRST_PARTY[parts[0]]
    for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def _forbidden(name: str, path: Path) -> bool:
    top = name.split(".")[0]
    if top == "psycopg" and str(path.relative_to(ROOT)).startswith(PSYCOPG_ALLOWED):
        return False
    return top in FORBIDDEN


def _violations(start: Path) -> list[str]:
    found, seen, todo = [], set(), [(start, [str(start.relative_to(ROOT))])]
    while todo:
        path, chain = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            if _forbidden(name, path):
                found.append(" -> ".join([*chain, name]))
            target = _first_party_file(name)
            if target is not None and target not in seen:
                todo.append((target, [*chain, str(target.relative_to(ROOT))]))
    return sorted(set(found))


def test_pure_packages_have_modules() -> None:
    names = {str(p.relative_to(ROOT)) for p in _modules()}
    assert "service/pgfeed/pgoutput/decode.py" in names and "service/pgfeed/pgoutput/_wire.py" in names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_pure(path: Path) -> None:
    assert _violations(path) == []


def test_checker_sees_every_import_form() -> None:
    source = ("import socket\nfrom asyncio import sleep\nimport psycopg.adapt as a\n"
              "def f():\n    import threading\nfrom ..errors import DecodeError\n")
    names = set(_imports_of(source, "pgfeed.pgoutput"))
    assert {"socket", "asyncio", "psycopg.adapt", "threading", "pgfeed.errors"} <= names
    pure = ROOT / "service/pgfeed/pgoutput/decode.py"
    assert [n for n in names if _forbidden(n, pure)] == [
        n for n in names if n.split(".")[0] in FORBIDDEN]
    assert not _forbidden("psycopg.adapt", ROOT / "service/pgfeed/decoding/values.py")
    assert _forbidden("asyncio", ROOT / "service/pgfeed/decoding/values.py")


def test_serving_starts_without_pyarrow() -> None:
    """pyarrow (~30 MB resident) loads on the first Arrow answer, not when the service starts."""
    import subprocess
    import sys

    code = ("import sys, pgfeed.runtime, pgfeed.http_api.app, pgfeed.grpc_api.server, pgfeed.cli; "
            "print('pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# -- layering --------------------------------------------------------------------------------------
# Who may import whom, bottom floor first: a module imports only from its own unit or from units on
# lower floors, so dependencies run one way (capture never reaches up into the feeds that drive it;
# a change log never into the backfills it stores). Units are import names: ``pgfeed.<name>`` (a subpackage or
# a top-level module of service/pgfeed), ``pgfeed`` (its __init__), ``pgfeed_client`` and ``pgfeed_spark``. A new
# module must be given a floor here (test_every_unit_has_a_floor).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("pgfeed_client",),
    ("pgfeed.prototags",),  # generated from feed.proto (encoding/tables.py): imports nothing
    ("pgfeed_spark", "pgfeed", "pgfeed.errors", "pgfeed.dsn", "pgfeed.config", "pgfeed.logs",
     "pgfeed.tls", "pgfeed.localpg", "pgfeed.codegen", "pgfeed.protowire", "pgfeed.allocator",
     "pgfeed.netorder", "pgfeed.compiled"),
    ("pgfeed.access", "pgfeed.pgoutput", "pgfeed.types", "pgfeed.ownership"),
    ("pgfeed.assembler",),
    ("pgfeed.decoding",),
    ("pgfeed.encoding", "pgfeed.changelog"),
    ("pgfeed.replication",),
    ("pgfeed.backfill",),
    ("pgfeed.feeds",),
    ("pgfeed.pgstore", "pgfeed.metrics"),
    ("pgfeed.grpc_api", "pgfeed.http_api"),
    ("pgfeed.runtime",),
    ("pgfeed.cli",),
    ("pgfeed.__main__",),
)
FLOOR = {unit: n for n, units in enumerate(FLOORS) for unit in units}
# Import cycles between files that another change breaks; none may be added (issue 29.2: none left,
# the served model and relation catalogue moved to the read side, ``pgfeed.decoding``).
KNOWN_CYCLES: list[list[str]] = []


def _source_files() -> list[Path]:
    return sorted(p for name, top in FIRST_PARTY.items() for p in (ROOT / top / name).rglob("*.py"))


def _unit(path: Path) -> str:
    _folder, name, *parts = path.relative_to(ROOT).with_suffix("").parts
    if name != "pgfeed" or parts == ["__init__"]:
        return name
    return f"{name}.{parts[0]}"


def _targets(path: Path) -> set[Path]:
    """The first-party files ``path`` imports: ``from pkg import mod`` is an import of ``pkg/mod.py``
    (a package's __init__ runs for any of its modules, so it is not an edge of its own then)."""
    names = _imports(path)
    found = set()
    for name in names:
        target = _first_party_file(name)
        if target is None or target == path:
            continue
        if target.name == "__init__.py" and any(
                other.startswith(name + ".") and _first_party_file(other) not in (None, target)
                for other in names) and not _names_a_definition(path, name):
            continue
        found.add(target)
    return found


def _names_a_definition(path: Path, package: str) -> bool:
    """Whether ``path`` takes from ``package`` a name that is not one of its modules."""
    tree = ast.parse(path.read_text())
    here = ".".join(path.relative_to(ROOT).parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = here.split(".")[:len(here.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            if mod == package and any(_first_party_file(f"{mod}.{a.name}") is None for a in node.names):
                return True
    return False


def _upward(unit: str, other: str) -> bool:
    """Whether an import from ``unit`` into ``other`` breaks the floors (up, or sideways)."""
    return other != unit and FLOOR[other] >= FLOOR[unit]


def _layer_violations() -> list[str]:
    found = []
    for path in _source_files():
        unit = _unit(path)
        for target in _targets(path):
            other = _unit(target)
            if _upward(unit, other):
                found.append(f"{path.relative_to(ROOT)} (floor {FLOOR[unit]}) imports "
                             f"{target.relative_to(ROOT)} (floor {FLOOR[other]})")
    return found


def _cycles(graph: dict[Path, set[Path]] | None = None) -> list[list[str]]:
    """Strongly connected groups of two or more files (Tarjan's algorithm, iterative)."""
    if graph is None:
        graph = {p: _targets(p) for p in _source_files()}
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    groups = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(str(member.relative_to(ROOT)))
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return sorted(groups)


def test_every_unit_has_a_floor() -> None:
    assert sorted({_unit(p) for p in _source_files()} - set(FLOOR)) == []


def test_imports_run_down_the_floors() -> None:
    assert _layer_violations() == []


def test_no_import_cycles() -> None:
    assert [c for c in _cycles() if c not in KNOWN_CYCLES] == []


def test_layer_checker_sees_a_cycle_and_an_upward_import(tmp_path: Path) -> None:
    """The checkers above fail on what they guard against: an import up the floors, a loop."""
    assert FLOOR["pgfeed.replication"] < FLOOR["pgfeed.feeds"]  # capture sits below the feeds
    assert FLOOR["pgfeed.changelog"] < FLOOR["pgfeed.backfill"]
    assert _upward("pgfeed.replication", "pgfeed.feeds")  # capture reaching into feeds
    assert _upward("pgfeed.changelog", "pgfeed.encoding")  # same floor, another unit
    assert not _upward("pgfeed.feeds", "pgfeed.replication")
    assert not _upward("pgfeed.feeds", "pgfeed.feeds")
    capture = ROOT / "service/pgfeed/replication/capture.py"
    assert _unit(capture) == "pgfeed.replication" and _unit(ROOT / "service/pgfeed/__init__.py") == "pgfeed"
    assert ROOT / "service/pgfeed/feeds/model.py" not in _targets(capture)
    assert ROOT / "service/pgfeed/replication/stream.py" in _targets(capture)
    sync = ROOT / "clients/pgfeed_client/_http_sync.py"  # `from pgfeed_client import _http_base`: the module, not __init__
    assert ROOT / "clients/pgfeed_client/_http_base.py" in _targets(sync)
    assert ROOT / "clients/pgfeed_client/__init__.py" not in _targets(sync)
    a, b, c, d = (ROOT / f"service/{n}.py" for n in "abcd")
    assert _cycles({a: {b}, b: {c}, c: {a, d}, d: set()}) == [
        ["service/a.py", "service/b.py", "service/c.py"]]
    assert _cycles({a: {b}, b: {c}, c: {d}, d: set()}) == []
