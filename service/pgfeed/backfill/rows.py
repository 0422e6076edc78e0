"""COPY text rows -> log frames of pgoutput Insert messages: how a chunk's rows are encoded.

The chunk query is ``COPY (SELECT every published column …) TO STDOUT``: each value is its
type's output function in the session's settings, exactly what pgoutput sends, with COPY's text
escapes (``\\N`` for NULL, a backslash before the few characters that need it). pgoutput's
TupleData is the same values unescaped, each after a kind byte and a length ('t'), or 'n' for
NULL, so a row becomes an Insert message without a value being decoded.

A chunk stays one ``Rows``: its frames back to back in one buffer (no Python object per row; a
row's key is read from its frame only when a window changed keys of its table), stamped with
their position when stored. ``_rows.c`` is the compiled twin (built by setup.py where a C
compiler is); this module's functions are the specification and the fallback.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pgfeed.backfill.keys import Key, tuple_key
from pgfeed.compiled import optional
from pgfeed.netorder import I16, I32, U32, U64

__all__ = ["IMPLEMENTATION", "Rows", "copy_text_rows", "read_copy"]

_i16 = I16.unpack_from
_u32 = U32.pack
LSN_BYTES = 8  # a frame: its LSN (zero until stored), >I length, the message
# From a frame's start to its TupleData: the LSN, the length, 'I', the relation id, 'N'
_TUPLE_AT = LSN_BYTES + 4 + 1 + 4 + 1


@dataclass(frozen=True, slots=True, eq=False)
class Rows:
    """A chunk's rows in key order, as log frames (``>QI`` LSN and length, then the Insert
    message) back to back in ``frames``; ``starts`` (native uint64) holds each frame's offset and
    the end. ``positions``: the key columns' places in a row."""

    frames: bytes
    starts: memoryview  # format "Q", len(self) + 1 items
    positions: tuple[int, ...]

    @classmethod
    def of(cls, messages: Sequence[bytes], positions: tuple[int, ...]) -> Rows:
        """Rows from whole Insert messages (tests; the Python fallback's result)."""
        zero = bytes(LSN_BYTES)
        frames = b"".join(zero + _u32(len(m)) + m for m in messages)
        offsets = [0]
        for m in messages:
            offsets.append(offsets[-1] + LSN_BYTES + 4 + len(m))
        return cls(frames, memoryview(struct.pack(f"={len(offsets)}Q", *offsets)).cast("Q"), positions)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def key(self, i: int) -> Key:
        """Row ``i``'s key values (each its type's text, as the stream's tuples carry it)."""
        key, _ = tuple_key(self.frames, self.starts[i] + _TUPLE_AT, self.positions)
        assert key is not None  # every column of a read row is sent whole
        return key

    def fitting(self, start: int, limit: int) -> int:
        """The end of the longest run of rows from ``start`` whose frames take at most ``limit``
        bytes (at least one row)."""
        stop = bisect.bisect_right(self.starts, self.starts[start] + limit, start, len(self.starts)) - 1
        return max(stop, start + 1)

    def stamp(self, prefix: bytes, runs: list[tuple[int, int]], lsn: int) -> bytes:
        """``prefix``, then the frames of the rows of each ``[start, stop)`` run at log position
        ``lsn``: a read transaction's payload."""
        return _stamp(prefix, self.frames, self.starts, runs, lsn)


def _stamp_py(prefix: bytes, frames: bytes, starts: Any, runs: list[tuple[int, int]],
              lsn: int) -> bytes:
    out = bytearray(prefix)
    for start, stop in runs:
        at = len(out) - starts[start]
        out += frames[starts[start]:starts[stop]]
        for i in range(start, stop):
            U64.pack_into(out, at + starts[i], lsn)
    return bytes(out)


def _copy_text_frames(block: bytes | bytearray | memoryview, header: bytes) -> tuple[bytes, bytes]:
    """Each row of COPY text format in ``block`` (rows end with a newline, fields are
    tab-separated, ``\\N`` is NULL, a backslash before b f n r t v is that control character and
    before anything else that character) as a frame: zero LSN, ``>I`` length, ``header`` +
    TupleData; and the frames' native uint64 offsets and end. ``header`` ends with the column
    count every row must have."""
    data = bytes(block)
    columns = _i16(header, len(header) - 2)[0]
    if data and not data.endswith(b"\n"):
        raise ValueError("COPY text data: row without end of line")
    messages = []
    for line in data.split(b"\n")[:-1]:
        fields = line.split(b"\t")
        if len(fields) != columns:
            raise ValueError("COPY text data: a row's field count is not the column count")
        parts = [header]
        for f in fields:
            v = None if f == b"\\N" else _unescape(f)
            parts.append(b"n" if v is None else b"t" + I32.pack(len(v)) + v)
        messages.append(b"".join(parts))
    rows = Rows.of(messages, ())
    return rows.frames, rows.starts.tobytes()


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


_UNESCAPE = {ord("b"): b"\b", ord("f"): b"\f", ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t",
             ord("v"): b"\v"}


def copy_text_rows(block: bytes | bytearray | memoryview, header: bytes,
                   positions: tuple[int, ...]) -> Rows:
    """A chunk's COPY text (every row, each ending with a newline) -> its ``Rows``;
    ValueError when the text is not COPY text of ``header``'s column count."""
    frames, starts = _encode(block, header)
    return Rows(frames, memoryview(starts).cast("Q"), positions)


_compiled: Any = optional("pgfeed.backfill._rows")
IMPLEMENTATION = "c" if _compiled is not None else "python"
_encode = _compiled.copy_text_frames if _compiled is not None else _copy_text_frames
_stamp = _compiled.stamp if _compiled is not None else _stamp_py
# (PGconn *, PQgetCopyData, PQfreemem addresses) -> (status, data): a COPY's rest, in C
read_copy: Any = _compiled.read_copy if _compiled is not None else None
