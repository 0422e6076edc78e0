"""COPY text rows -> pgoutput Insert messages: how a chunk's rows are encoded.

The chunk query is ``COPY (SELECT every published column …) TO STDOUT``: each value is its
type's output function in the session's settings, exactly what pgoutput sends, with COPY's text
escapes (``\\N`` for NULL, a backslash before the few characters that need it). pgoutput's
TupleData is the same values unescaped, each after a kind byte and a length ('t'), or 'n' for
NULL, so a row becomes an Insert message without a value being decoded. ``_rows.c`` is the
compiled twin (built by setup.py where a C compiler is); this module's function is the
specification and the fallback.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["IMPLEMENTATION", "copy_text_rows"]

_i16 = struct.Struct(">h").unpack_from
_u32 = struct.Struct(">I").pack


_UNESCAPE = {ord("b"): b"\b", ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t",
             ord("v"): b"\v"}


def _copy_text_rows(block: bytes | bytearray | memoryview, header: bytes, positions: tuple[int, ...],
                    out: list[tuple[tuple[Any, ...], bytes]]) -> int:
    """Append ``(key, >I length + header + TupleData)`` for each row of COPY text format in
    ``block`` (rows end with a newline, fields are tab-separated, ``\\N`` is NULL, a backslash
    before b f n r t v is that control character and before anything else that character):
    ``key`` the fields at ``positions``. ``header`` ends with the column count every row must
    have. Returns the rows appended."""
    data = bytes(block)
    columns = _i16(header, len(header) - 2)[0]
    count = 0
    if data and not data.endswith(b"\n"):
        raise ValueError("COPY text data: row without end of line")
    for line in data.split(b"\n")[:-1]:
        fields = line.split(b"\t")
        if len(fields) != columns:
            raise ValueError("COPY text data: a row's field count is not the column count")
        values = [None if f == b"\\N" else _unescape(f) for f in fields]
        parts = [header]
        for v in values:
            parts.append(b"n" if v is None else b"t" + struct.pack(">i", len(v)) + v)
        body = b"".join(parts)
        out.append((tuple(values[p] for p in positions), _u32(len(body)) + body))
        count += 1
    return count


def _unescape(field: bytes) -> bytes:
    if b"\\" not in field:
        return field
    out = bytearray()
    i = 0
    while i < len(field):
        c = field[i]
        if c == 0x5C:  # backslash
            i += 1
            if i == len(field):
                raise ValueError("COPY text data: backslash at end of line")
            c = field[i]
            out += _UNESCAPE.get(c, bytes((c,)))
        else:
            out.append(c)
        i += 1
    return bytes(out)


def _load() -> Any:
    try:
        from pgfeed.backfill import _rows  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _rows


_compiled = _load()
IMPLEMENTATION = "c" if _compiled is not None else "python"
copy_text_rows = _compiled.copy_text_rows if _compiled is not None else _copy_text_rows
