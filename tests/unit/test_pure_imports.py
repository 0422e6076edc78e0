"""Guideline 1: service/pgoutput and service/assembler stay pure (no I/O, network or concurrency
libraries), checked by walking their imports with ``ast``, following first-party imports too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE_PACKAGES = ("service/pgoutput", "service/assembler", "service/decoding", "service/types")
FORBIDDEN = ("psycopg", "asyncio", "sqlite3", "grpc", "fastapi", "socket", "threading")
# Type loading reuses psycopg's text loaders (psycopg.adapt: no connection): the row loader and
# the type registry's modules that declare loaders, and only those, may import psycopg. The
# other forbidden modules stay forbidden there too.
PSYCOPG_ALLOWED = {"service/decoding/values.py", *(f"service/types/{name}.py" for name in (
    "family", "registry", "floating", "json", "interval", "datetime", "money"))}
FIRST_PARTY = ("service", "clients")


def _modules() -> list[Path]:
    return sorted(p for pkg in PURE_PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _imports(path: Path) -> list[str]:
    """Absolute names of everything ``path`` imports (relative imports resolved)."""
    package = ".".join(path.relative_to(ROOT).parts[:-1])
    return _imports_of(path.read_text(), package)


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
    for candidate in (ROOT.joinpath(*parts).with_suffix(".py"), ROOT.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def _forbidden(name: str, path: Path) -> bool:
    top = name.split(".")[0]
    if top == "psycopg" and str(path.relative_to(ROOT)) in PSYCOPG_ALLOWED:
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
    assert "service/pgoutput/decode.py" in names and "service/pgoutput/_wire.py" in names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_is_pure(path: Path) -> None:
    assert _violations(path) == []


def test_checker_sees_every_import_form() -> None:
    source = ("import socket\nfrom asyncio import sleep\nimport psycopg.adapt as a\n"
              "def f():\n    import threading\nfrom ..errors import DecodeError\n")
    names = set(_imports_of(source, "service.pgoutput"))
    assert {"socket", "asyncio", "psycopg.adapt", "threading", "service.errors"} <= names
    pure = ROOT / "service/pgoutput/decode.py"
    assert [n for n in names if _forbidden(n, pure)] == [
        n for n in names if n.split(".")[0] in FORBIDDEN]
    assert not _forbidden("psycopg.adapt", ROOT / "service/decoding/values.py")
    assert _forbidden("asyncio", ROOT / "service/decoding/values.py")


def test_serving_starts_without_pyarrow() -> None:
    """pyarrow (~30 MB resident) loads on the first Arrow answer, not when the service starts."""
    import subprocess
    import sys

    code = ("import sys, service.runtime, service.http_api.app, service.grpc_api.server, service.cli; "
            "print('pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
