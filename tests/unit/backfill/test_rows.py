"""COPY text rows -> Insert messages: the compiled encoder and its Python twin agree, and the
result decodes as the Insert pgoutput would have sent (the values unescaped)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgfeed.backfill import rows
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import InsertMessage

HEADER = b"I" + struct.pack(">I", 16400) + b"N" + struct.pack(">h", 4)
# PostgreSQL's CopyAttributeOutText: these control characters as letters, the backslash doubled
ESCAPES = {b"\b": b"\\b", b"\f": b"\\f", b"\n": b"\\n", b"\r": b"\\r", b"\t": b"\\t", b"\v": b"\\v",
           b"\\": b"\\\\"}


def escape(value: bytes | None) -> bytes:
    if value is None:
        return b"\\N"
    return b"".join(ESCAPES.get(bytes((c,)), bytes((c,))) for c in value)


def copy_row(fields: list[bytes | None]) -> bytes:
    return b"\t".join(escape(f) for f in fields) + b"\n"


def implementations() -> list[object]:
    if rows._compiled is None:
        pytest.fail("service/backfill/_rows.c is not built (setup.py build_ext --inplace)")
    return [rows._compiled.copy_text_rows, rows._copy_text_rows]


# any text but NUL (PostgreSQL's text cannot hold it): control characters, backslashes, tabs
value = st.one_of(st.none(), st.text(max_size=3000).map(lambda t: t.replace("\0", "").encode()),
                  st.sampled_from([b"\\N", b"\\", b"\t\n\r\b\f\v", b""]))
key = st.text(min_size=1, max_size=20).map(lambda t: t.replace("\0", "x").encode())


@given(st.lists(st.tuples(value, key, value, key), max_size=5))
def test_both_encoders_agree_and_decode_as_inserts(
        tuples: list[tuple[bytes | None, bytes, bytes | None, bytes]]) -> None:
    block = b"".join(copy_row(list(t)) for t in tuples)
    results = []
    for copy_text_rows in implementations():
        out: list[tuple[tuple[bytes | None, ...], bytes]] = []
        assert copy_text_rows(block, HEADER, (3, 1), out) == len(tuples)  # type: ignore[operator]
        results.append(out)
    assert results[0] == results[1]
    for (got_key, body), values in zip(results[0], tuples, strict=True):
        assert got_key == (values[3], values[1])  # in key order, unescaped
        assert struct.unpack(">I", body[:4])[0] == len(body) - 4
        msg = decode(body[4:])
        assert isinstance(msg, InsertMessage) and msg.relation_id == 16400
        # the wire bytes: 't' + length + value, or 'n'
        expected = struct.pack(">h", 4) + b"".join(
            b"n" if v is None else b"t" + struct.pack(">i", len(v)) + v for v in values)
        assert body[4 + len(HEADER) - 2:] == expected


def test_escapes_and_null_as_postgresql_writes_them() -> None:
    for copy_text_rows in implementations():
        out: list[tuple[tuple[bytes | None, ...], bytes]] = []
        copy_text_rows(b"k\\\\1\ta\\tb\\\\N\t\\N\tx\\.y\n", HEADER, (0,), out)  # type: ignore[operator]
        ((k, body),) = out
        msg = decode(body[4:])
        assert k == (b"k\\1",)
        assert isinstance(msg, InsertMessage)
        assert msg.new_tuple.values == ("k\\1", "a\tb\\N", None, "x.y")


def test_malformed_blocks_raise_value_error() -> None:
    for copy_text_rows in implementations():
        for block in (b"1\t2\t3\n",  # a field short
                      b"1\t2\t3\t4",  # no end of line
                      b"1\t2\t3\t4\\\n"):  # a backslash escaping the end of line
            with pytest.raises(ValueError):
                copy_text_rows(block, HEADER, (0,), [])  # type: ignore[operator]
