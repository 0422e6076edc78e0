"""Test configuration: fixtures live in tests/fixtures/fix_*.py and are loaded as plugins."""

import os
import sys
from pathlib import Path

from tests.checkout import PYTHONPATH, SOURCE_ROOTS

# the suite, and every process it starts, imports this checkout's packages (see tests/checkout.py)
sys.path[:0] = [str(path) for path in SOURCE_ROOTS if str(path) not in sys.path]
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (PYTHONPATH, os.environ.get("PYTHONPATH", "")) if p)

pytest_plugins = sorted(
    f"tests.fixtures.{p.stem}" for p in (Path(__file__).parent / "fixtures").glob("fix_*.py")
)
