"""Benchmarks measure this checkout's code, and so do the servers and workers they start: its
package folders (``tests/checkout.py`` names them) go first on ``sys.path`` and into
``PYTHONPATH``. A script imports this module before anything of pgfeed's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.checkout import PYTHONPATH, SOURCE_ROOTS

sys.path[:0] = [str(path) for path in SOURCE_ROOTS if str(path) not in sys.path]
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (PYTHONPATH, os.environ.get("PYTHONPATH", "")) if p)
