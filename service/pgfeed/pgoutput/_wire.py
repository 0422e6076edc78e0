"""pgoutput wire primitives: precompiled big-endian ``struct`` layouts and the bounds-checked _Reader.

Every read checks its bounds first, so a short or malformed buffer raises DecodeError (naming the
message, the field and the byte offset) and never IndexError, struct.error or UnicodeDecodeError.
"""

from __future__ import annotations

from struct import Struct
from struct import error as StructError
from typing import NoReturn

from pgfeed.errors import DecodeError
from pgfeed.netorder import I32, U16, U32  # network byte order, as pq_sendint*/pq_getmsgint* use
from pgfeed.pgoutput.messages import UNCHANGED_TOAST, TupleData, TupleKind

_I32_AT = I32.unpack_from
_U16_AT = U16.unpack_from

# TupleData column kinds (proto.c: LOGICALREP_COLUMN_NULL/UNCHANGED/TEXT/BINARY).
_KIND_NULL, _KIND_UNCHANGED, _KIND_TEXT, _KIND_BINARY = (int(k) for k in (
    TupleKind.NULL, TupleKind.UNCHANGED_TOAST, TupleKind.TEXT, TupleKind.BINARY))


class Layout:
    """A fixed run of fields read with one precompiled Struct; knows which field a short read hit."""

    __slots__ = ("_ends", "names", "size", "struct")

    def __init__(self, *fields: tuple[str, str]) -> None:
        """``fields``: (struct code, field name) pairs in wire order, e.g. ("Q", "final_lsn")."""
        self.struct = Struct(">" + "".join(code for code, _ in fields))
        self.names = tuple(name for _, name in fields)
        ends, total = [], 0
        for code, _ in fields:
            total += Struct(">" + code).size
            ends.append(total)
        self._ends = tuple(ends)
        self.size = self.struct.size

    def field_at(self, available: int) -> tuple[str, int, int]:
        """The first field that does not fit in ``available`` bytes: name, offset in the layout,
        size."""
        start = 0
        for name, end in zip(self.names, self._ends, strict=True):
            if end > available:
                return name, start, end - start
            start = end
        raise ValueError(f"{available} bytes hold the whole layout")


class _Reader:
    """An offset over one whole pgoutput message; every read is bounds checked.

    It reads a ``bytes`` object: ``decode`` copies a memoryview once on entry (about 60 ns for a
    typical change) because ``bytes.find``, slicing and ``.decode`` beat their memoryview
    equivalents by more than that on the short fields pgoutput is made of.
    """

    __slots__ = ("data", "end", "msg_type", "pos")

    def __init__(self, data: bytes, pos: int, msg_type: str) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)
        self.msg_type = msg_type

    def fail(self, what: str, field: str, offset: int) -> NoReturn:
        raise DecodeError(what, msg_type=self.msg_type, field=field, offset=offset)

    def short(self, field: str, offset: int, need: int) -> NoReturn:
        have = self.end - offset
        self.fail(f"truncated: {field} needs {need} bytes, {max(have, 0)} left", field, offset)

    def remaining(self) -> int:
        return self.end - self.pos

    def layout(self, lay: Layout, prefix: str = "") -> tuple[int, ...]:
        pos = self.pos
        stop = pos + lay.size
        if stop > self.end:
            name, rel, size = lay.field_at(self.end - pos)
            self.short(prefix + name, pos + rel, size)
        self.pos = stop
        return lay.struct.unpack_from(self.data, pos)

    def u8(self, field: str) -> int:
        pos = self.pos
        if pos >= self.end:
            self.short(field, pos, 1)
        self.pos = pos + 1
        return self.data[pos]

    def u16(self, field: str) -> int:
        pos = self.pos
        if pos + 2 > self.end:
            self.short(field, pos, 2)
        self.pos = pos + 2
        value: int = _U16_AT(self.data, pos)[0]
        return value

    def u32(self, field: str) -> int:
        pos = self.pos
        if pos + 4 > self.end:
            self.short(field, pos, 4)
        self.pos = pos + 4
        value: int = U32.unpack_from(self.data, pos)[0]
        return value

    def i32(self, field: str) -> int:
        pos = self.pos
        if pos + 4 > self.end:
            self.short(field, pos, 4)
        self.pos = pos + 4
        value: int = _I32_AT(self.data, pos)[0]
        return value

    def length(self, field: str) -> int:
        """An Int32 byte or item count: negative is malformed."""
        pos = self.pos
        n = self.i32(field)
        if n < 0:
            self.fail(f"negative length {n}", field, pos)
        return n

    def raw(self, n: int, field: str) -> bytes:
        pos = self.pos
        stop = pos + n
        if stop > self.end:
            self.fail(f"length {n} runs past the end ({self.end - pos} bytes left)", field, pos)
        self.pos = stop
        return self.data[pos:stop]

    def string(self, field: str) -> str:
        """A NUL-terminated UTF-8 string (pq_sendstring)."""
        pos = self.pos
        nul = self.data.find(b"\0", pos)
        if nul < 0:
            self.fail("string has no NUL terminator", field, pos)
        try:
            text = self.data[pos:nul].decode()
        except UnicodeDecodeError as exc:
            self.fail(f"invalid UTF-8 ({exc.reason})", field, pos + exc.start)
        self.pos = nul + 1
        return text

    def finish(self) -> None:
        """A complete message must end exactly here: trailing bytes mean a framing error."""
        if self.pos != self.end:
            self.fail(f"{self.end - self.pos} trailing bytes after a complete message",
                      "end", self.pos)

    def tuple_data(self, field: str) -> TupleData:
        """TupleData: Int16 column count, then per column a kind byte ('n', 'u', 't', 'b') and,
        for 't'/'b', an Int32 length and that many bytes (proto.c logicalrep_write_tuple).

        This is the hot path of decode-on-read, hence the locals and the 't'-first test order.
        """
        data = self.data
        end = self.end
        pos = self.pos
        if pos + 2 > end:
            self.short(field + ".ncols", pos, 2)
        ncols = _U16_AT(data, pos)[0]
        pos += 2
        values: list[None | object] = []
        append = values.append
        i = 0
        try:
            while i < ncols:
                if pos >= end:
                    self.short(f"{field}[{i}].kind", pos, 1)
                kind = data[pos]
                if kind == _KIND_TEXT or kind == _KIND_BINARY:
                    start = pos + 5
                    if start > end:
                        self.short(f"{field}[{i}].length", pos + 1, 4)
                    n = _I32_AT(data, pos + 1)[0]
                    stop = start + n
                    if n < 0:
                        self.fail(f"negative length {n}", f"{field}[{i}].length", pos + 1)
                    if stop > end:
                        self.fail(f"length {n} runs past the end ({end - start} bytes left)",
                                  f"{field}[{i}].value", start)
                    if kind == _KIND_TEXT:
                        append(data[start:stop].decode())
                    else:
                        append(data[start:stop])
                    pos = stop
                elif kind == _KIND_NULL:
                    append(None)
                    pos += 1
                elif kind == _KIND_UNCHANGED:
                    append(UNCHANGED_TOAST)
                    pos += 1
                else:
                    self.fail(f"unknown TupleData kind {show_byte(kind)}", f"{field}[{i}].kind",
                              pos)
                i += 1
        except UnicodeDecodeError as exc:
            self.fail(f"invalid UTF-8 ({exc.reason})", f"{field}[{i}].value", pos + 5 + exc.start)
        self.pos = pos
        return TupleData(tuple(values))  # type: ignore[arg-type]


def show_byte(b: int) -> str:
    """A byte for an error message: its value in hex, and its character when printable."""
    return f"0x{b:02x} ({chr(b)!r})" if 0x20 <= b < 0x7F else f"0x{b:02x}"


# Frozen dataclasses assign each field through object.__setattr__ in __init__, which costs about
# a third of an Insert's decode time. The hot path fills the slots through their member
# descriptors instead: same objects (eq/hash/repr are field based), built ~2x faster.
_new = object.__new__
_set_values = TupleData.__dict__["values"].__set__


# What the optimistic readers may raise on malformed input; callers catch exactly these and
# re-read through _Reader, which raises the precise DecodeError.
FAST_FAILURES = (IndexError, StructError, ValueError)  # ValueError covers UnicodeDecodeError


def fast_tuple(data: bytes, pos: int, ncols: int) -> tuple[TupleData, int]:
    """Read the ``ncols`` columns of a TupleData whose count the caller has already unpacked
    (``pos`` is just past it) without per-field bounds checks; return it and the next offset.

    Only for the hot path: a malformed buffer raises one of FAST_FAILURES (never a wrong value:
    every value's end is checked against the buffer's), and the caller falls back to _Reader.
    NULL columns are the list's preset None; 't' is tested first as the most common kind.
    """
    end = len(data)
    values: list[object] = [None] * ncols
    for i in range(ncols):
        kind = data[pos]
        if kind == _KIND_TEXT:
            start = pos + 5
            pos = start + _I32_AT(data, start - 4)[0]
            if pos > end or pos < start:  # past the end, or a negative length
                raise ValueError("bad length")
            values[i] = data[start:pos].decode()
        elif kind == _KIND_NULL:
            pos += 1
        elif kind == _KIND_BINARY:
            start = pos + 5
            pos = start + _I32_AT(data, start - 4)[0]
            if pos > end or pos < start:
                raise ValueError("bad length")
            values[i] = data[start:pos]
        elif kind == _KIND_UNCHANGED:
            values[i] = UNCHANGED_TOAST
            pos += 1
        else:
            raise ValueError("bad kind")
    obj = _new(TupleData)
    _set_values(obj, tuple(values))
    return obj, pos
