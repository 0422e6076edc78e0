"""tests/fixtures/fix_noskip.py turns every skip into a failure, wherever it is raised."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CASES = '''
import pytest
missing = pytest.importorskip("no_such_module_pgfeed")
'''

RUNTIME = '''
import pytest

def test_skips_at_run_time():
    pytest.skip("no server here")

@pytest.mark.skipif(True, reason="marked")
def test_marked():
    pass

def test_passes():
    assert True
'''


def _pytest(tmp_path: Path, source: str) -> str:
    (tmp_path / "test_case.py").write_text(source)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.fixtures.fix_noskip", "-c", "/dev/null",
         "--rootdir", str(tmp_path), str(tmp_path / "test_case.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    return proc.stdout.strip().splitlines()[-1]


def test_a_skip_at_import_is_a_failure(tmp_path: Path) -> None:
    assert "1 error" in _pytest(tmp_path, CASES)


def test_skips_at_run_time_and_by_marker_are_failures(tmp_path: Path) -> None:
    last = _pytest(tmp_path, RUNTIME)
    # a skipif skips in setup: that failure counts as an error
    assert last.startswith("1 failed, 1 passed, 1 error") and "skipped" not in last, last
