"""COPY BINARY tuples of text columns -> pgoutput Insert messages: how a chunk's rows are encoded.

The chunk query is ``COPY (SELECT key columns::text…, every column::text…) TO STDOUT (FORMAT
binary)``: each tuple is Int16 field count, then per field Int32 length (-1 for NULL) and the
text bytes (the cast to text is the type's output function, in the session's settings: what
pgoutput sends). pgoutput's TupleData differs only in a kind byte per column ('t' before the
length, 'n' instead of a NULL's length), so a row becomes an Insert message without a value being
decoded. ``_rows.c`` is the compiled twin (built by setup.py where a C compiler is); this module's
function is the specification and the fallback.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["IMPLEMENTATION", "copy_rows"]

_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_i16 = struct.Struct(">h").unpack_from
_i32 = struct.Struct(">i").unpack_from
_u32 = struct.Struct(">I").pack
_T = [b"t" + struct.pack(">i", n) for n in range(4096)]


def _copy_rows(block: bytes | bytearray | memoryview, header: bytes, nkeys: int,
               out: list[tuple[tuple[Any, ...], bytes]]) -> int:
    """Append ``(key, >I length + header + TupleData)`` for each tuple of ``block`` to ``out``:
    ``key`` the first ``nkeys`` fields, the TupleData of the others. A block may start with COPY's
    signature header and may hold its -1 trailer. Returns the tuples appended."""
    data = bytes(block)
    pos, end, count = 0, len(data), 0
    if data.startswith(_SIGNATURE):
        pos = 19 + _i32(data, 15)[0]
    while end - pos >= 2:
        fields = _i16(data, pos)[0]
        pos += 2
        if fields == -1:
            break
        if fields < nkeys:
            raise ValueError("COPY BINARY data: fewer fields than key columns")
        key: list[bytes | None] = []
        parts = [header]
        for i in range(fields):
            if end - pos < 4:
                raise ValueError("COPY BINARY data: short field")
            n = _i32(data, pos)[0]
            pos += 4
            if n < -1 or end - pos < n:
                raise ValueError("COPY BINARY data: bad field length")
            value = None if n < 0 else data[pos:pos + n]
            if n > 0:
                pos += n
            if i < nkeys:
                key.append(value)
            elif value is None:
                parts.append(b"n")
            else:
                parts.append(_T[n] if n < 4096 else b"t" + struct.pack(">i", n))
                parts.append(value)
        body = b"".join(parts)
        out.append((tuple(key), _u32(len(body)) + body))
        count += 1
    return count


def _load() -> Any:
    try:
        from service.backfill import _rows  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _rows


_compiled = _load()
IMPLEMENTATION = "c" if _compiled is not None else "python"
copy_rows = _compiled.copy_rows if _compiled is not None else _copy_rows
