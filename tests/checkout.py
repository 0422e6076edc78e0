"""This checkout's package folders, for the suite and the processes it starts.

Each top-level folder holds one package under its import name (``service/pgfeed``,
``clients/pgfeed_client`` and ``clients/pgfeed_proto``, ``spark_connector/pgfeed_spark``). The suite
imports them from this checkout, whatever the venv has installed (a worktree may share another
checkout's venv), and so do the servers, CLIs and Spark workers it starts: ``PYTHONPATH`` names the
same folders, then the checkout's root (scripts a test runs import ``tests.…`` helpers);
``conftest.py`` sets both.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = tuple(ROOT / folder for folder in ("service", "clients", "spark_connector"))
PYTHONPATH = os.pathsep.join(str(path) for path in (*SOURCE_ROOTS, ROOT))
