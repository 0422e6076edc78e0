"""The type checker, run by the test command: ``mypy --strict`` on what clients install
(``pgfeed_client``, ``pgfeed_spark``) and on ``pgfeed`` (service/pgfeed), plain ``mypy`` (pyproject's
[tool.mypy], with pydantic's plugin) on ``pgfeed`` too. Packages by import name, found in the
folders that hold them ([tool.mypy]'s ``mypy_path``).
No error is tolerated anywhere.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.checkout import PYTHONPATH

ROOT = Path(__file__).resolve().parents[2]
ERROR = re.compile(r"^(?P<path>[\w/.]+\.pyi?):\d+: error: ", re.MULTILINE)


def _mypy(*args: str) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
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
    assert code == 0 and ERROR.search(text) is None, text


def test_service_passes_strict() -> None:
    code, text = _mypy("--strict", "-p", "pgfeed")
    assert code == 0 and ERROR.search(text) is None, text


def test_the_check_sees_a_type_error(tmp_path: Path) -> None:
    """mypy runs for real here: a wrong return type is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f() -> int:\n    return 'x'\n")
    code, text = _mypy("--strict", str(bad))
    assert code == 1 and "Incompatible return value type" in text, text
