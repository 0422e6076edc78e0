"""COPY BINARY tuples -> Insert messages: the compiled encoder and its Python twin agree, and the
result decodes as the Insert pgoutput would have sent."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.backfill import rows
from service.pgoutput.decode import decode
from service.pgoutput.messages import InsertMessage

HEADER = b"I" + struct.pack(">I", 16400) + b"N" + struct.pack(">h", 3)
SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)


def copy_tuple(fields: list[bytes | None]) -> bytes:
    out = struct.pack(">h", len(fields))
    for f in fields:
        out += struct.pack(">i", -1) if f is None else struct.pack(">i", len(f)) + f
    return out


def implementations() -> list[object]:
    if rows._compiled is None:
        pytest.fail("service/backfill/_rows.c is not built (setup.py build_ext --inplace)")
    return [rows._compiled.copy_rows, rows._copy_rows]


value = st.one_of(st.none(), st.text(max_size=3000).map(str.encode))


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=20), value, value, value), max_size=5))
def test_both_encoders_agree_and_decode_as_inserts(
        tuples: list[tuple[bytes, bytes | None, bytes | None, bytes | None]]) -> None:
    block = SIGNATURE + b"".join(copy_tuple([k, a, b, c]) for k, a, b, c in tuples) + b"\xff\xff"
    results = []
    for copy_rows in implementations():
        out: list[tuple[tuple[bytes | None, ...], bytes]] = []
        assert copy_rows(block, HEADER, 1, out) == len(tuples)  # type: ignore[operator]
        results.append(out)
    assert results[0] == results[1]
    for (key, body), (k, *values) in zip(results[0], tuples, strict=True):
        assert key == (k,)
        assert struct.unpack(">I", body[:4])[0] == len(body) - 4
        msg = decode(body[4:])
        assert isinstance(msg, InsertMessage) and msg.relation_id == 16400
        assert msg.new_tuple.values == tuple(None if v is None else v.decode() for v in values)
        # the wire bytes: 't' + length + value, or 'n'
        expected = struct.pack(">h", 3) + b"".join(
            b"n" if v is None else b"t" + struct.pack(">i", len(v)) + v for v in values)
        assert body[4 + len(HEADER) - 2:] == expected


def test_malformed_blocks_raise_value_error() -> None:
    for copy_rows in implementations():
        with pytest.raises(ValueError):
            copy_rows(struct.pack(">h", 2) + struct.pack(">i", 50) + b"short", HEADER, 1, [])  # type: ignore[operator]
