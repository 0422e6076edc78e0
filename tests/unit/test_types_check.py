"""The type checker, run by the test command: ``mypy --strict`` on what clients install
(``pgfeed_client``, ``pgfeed_spark``) and on ``pgfeed`` (service/), plain ``mypy`` (pyproject's
[tool.mypy], with pydantic's plugin) on ``pgfeed`` too. Packages by import name: the folders are
reached through the root's symlinks (pgfeed -> service/), so mypy names files ``pgfeed/...``.

The stored payload's type (``bytes | SpilledPayload``, narrowed nowhere on the read side) and
the read side's RawChange inside lists typed ``list[Change]`` are what strict still finds: those errors are counted in
STRICT_PENDING and may only go down. Nothing else may have any.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ERROR = re.compile(r"^(?P<path>[\w/.]+\.pyi?):\d+: error: ", re.MULTILINE)
PENDING_PREFIX = ("pgfeed/assembler/", "pgfeed/decoding/")
PAYLOAD_PENDING = 13  # plain mypy: at most this many, all under PENDING_PREFIX
# mypy --strict on service/: where errors may remain (issue 16's type registry), and how many.
STRICT_PENDING = {
    "pgfeed/assembler/": 2,  # payload union (bytes | SpilledPayload) narrowed nowhere
    "pgfeed/decoding/": 11,  # the same
    # `type(c) is RawChange` in loops over Transaction.changes, typed list[Change] although the
    # read side also puts RawChange there (declared one layer up, in decoding/)
    "pgfeed/encoding/": 3,
    "pgfeed/http_api/encode_debezium.py": 1,
}


def _mypy(*args: str) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}"}
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary",
                          "--cache-dir", str(ROOT / "build" / "mypy-cache"), *args],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    return out.returncode, out.stdout + out.stderr


@pytest.mark.parametrize("package", ["pgfeed_client", "pgfeed_spark"])
def test_client_packages_pass_strict(package: str) -> None:
    code, text = _mypy("--strict", "-p", package)
    assert code == 0 and ERROR.search(text) is None, text


def test_service_passes_mypy() -> None:
    code, text = _mypy("-p", "pgfeed")
    errors = [m.group("path") for m in ERROR.finditer(text)]
    assert [e for e in errors if not e.startswith(PENDING_PREFIX)] == [], text
    assert len(errors) <= PAYLOAD_PENDING, text
    assert code in (0, 1) and "Traceback" not in text, text


def test_service_passes_strict_outside_the_read_path_reshape() -> None:
    _, text = _mypy("--strict", "-p", "pgfeed")
    errors = [m.group("path") for m in ERROR.finditer(text)]
    counts = {prefix: sum(e.startswith(prefix) for e in errors) for prefix in STRICT_PENDING}
    assert [e for e in errors if not e.startswith(tuple(STRICT_PENDING))] == [], text
    assert all(counts[p] <= n for p, n in STRICT_PENDING.items()), (counts, text)
    assert "Traceback" not in text, text


def test_the_check_sees_a_type_error(tmp_path: Path) -> None:
    """mypy runs for real here: a wrong return type is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f() -> int:\n    return 'x'\n")
    code, text = _mypy("--strict", str(bad))
    assert code == 1 and "Incompatible return value type" in text, text
