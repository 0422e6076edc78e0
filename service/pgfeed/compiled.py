"""The optional compiled modules (built by setup.py where a C compiler is): each has a Python
twin, its specification, which runs where the module was not built or when
``PGFEED_IMPL=reference`` asks for the twins (tests and benchmarks compare the two)."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["optional"]


def optional(name: str) -> ModuleType | None:
    """The compiled module ``name``, or None (not built, or the twins asked for)."""
    if os.environ.get("PGFEED_IMPL", "") == "reference":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None
