"""Addresses of the libpq functions the compiled receive loops call (``replication/_receive.c``,
``backfill/_rows.c``): those of the libpq psycopg's connections live in, which psycopg's binary
wheel ships and which may differ from the system's, so no compiled module links a libpq of its
own."""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any, NamedTuple

from psycopg import pq

__all__ = ["Functions", "functions"]


class Functions(NamedTuple):
    get_copy_data: int  # PQgetCopyData
    freemem: int  # PQfreemem
    consume_input: int  # PQconsumeInput


@functools.cache
def functions() -> Functions | None:
    """The addresses, from psycopg's ctypes library or the one libpq mapped into this process;
    None when that is not certain (the callers then use psycopg's own calls)."""
    try:
        if pq.__impl__ == "python":
            from psycopg.pq import _pq_ctypes
            found: tuple[Any, ...] = (_pq_ctypes.PQgetCopyData, _pq_ctypes.PQfreemem,
                                      _pq_ctypes.PQconsumeInput)
        else:
            with open("/proc/self/maps") as maps:
                paths = {parts[5] for line in maps if len(parts := line.split(None, 5)) == 6}
            libpq = {p.strip() for p in paths if os.path.basename(p.strip()).startswith(("libpq.", "libpq-"))}
            if len(libpq) != 1:
                return None
            lib = ctypes.CDLL(libpq.pop())
            found = (lib.PQgetCopyData, lib.PQfreemem, lib.PQconsumeInput)
        addresses = [ctypes.cast(f, ctypes.c_void_p).value for f in found]
    except (OSError, AttributeError, ImportError):
        return None
    if not all(addresses):
        return None
    return Functions(*(int(a) for a in addresses if a))
