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
        pytest.fail("service/pgfeed/backfill/_rows.c is not built (setup.py build_ext --inplace)")
    return [rows._compiled.copy_text_frames, rows._copy_text_frames]


def encode_both(block: bytes, positions: tuple[int, ...]) -> rows.Rows:
    """The chunk's Rows by both encoders, which must agree byte for byte."""
    results = [encode(block, HEADER) for encode in implementations()]  # type: ignore[operator]
    assert results[0] == results[1]
    frames, starts = results[0]
    return rows.Rows(frames, memoryview(starts).cast("Q"), positions)


def messages(chunk: rows.Rows) -> list[bytes]:
    """Each row's message, checking its frame: a zero LSN (not stored yet) and its length."""
    out = []
    for i in range(len(chunk)):
        frame = chunk.frames[chunk.starts[i]:chunk.starts[i + 1]]
        assert frame[:8] == bytes(8)
        assert struct.unpack(">I", frame[8:12])[0] == len(frame) - 12
        out.append(frame[12:])
    return out


# any text but NUL (PostgreSQL's text cannot hold it): control characters, backslashes, tabs
value = st.one_of(st.none(), st.text(max_size=3000).map(lambda t: t.replace("\0", "").encode()),
                  st.sampled_from([b"\\N", b"\\", b"\t\n\r\b\f\v", b""]))
key = st.text(min_size=1, max_size=20).map(lambda t: t.replace("\0", "x").encode())


@given(st.lists(st.tuples(value, key, value, key), max_size=5))
def test_both_encoders_agree_and_decode_as_inserts(
        tuples: list[tuple[bytes | None, bytes, bytes | None, bytes]]) -> None:
    block = b"".join(copy_row(list(t)) for t in tuples)
    chunk = encode_both(block, (3, 1))
    assert len(chunk) == len(tuples) and chunk.starts[len(chunk)] == len(chunk.frames)
    for i, (message, values) in enumerate(zip(messages(chunk), tuples, strict=True)):
        assert chunk.key(i) == (values[3], values[1])  # in key order, unescaped
        msg = decode(message)
        assert isinstance(msg, InsertMessage) and msg.relation_id == 16400
        # the wire bytes: 't' + length + value, or 'n'
        expected = struct.pack(">h", 4) + b"".join(
            b"n" if v is None else b"t" + struct.pack(">i", len(v)) + v for v in values)
        assert message[len(HEADER) - 2:] == expected


def test_escapes_and_null_as_postgresql_writes_them() -> None:
    chunk = encode_both(b"k\\\\1\ta\\tb\\\\N\t\\N\tx\\.y\n\\N\t\\\\N\t\\NN\t\n", (0,))
    first, second = (decode(m) for m in messages(chunk))
    assert chunk.key(0) == (b"k\\1",)
    assert isinstance(first, InsertMessage) and isinstance(second, InsertMessage)
    assert first.new_tuple.values == ("k\\1", "a\tb\\N", None, "x.y")
    # only \N alone is NULL: an escaped backslash before N, or \N and more, is text
    assert second.new_tuple.values == (None, "\\N", "NN", "")


def test_malformed_blocks_raise_value_error() -> None:
    for encode in implementations():
        for block in (b"1\t2\t3\n",  # a field short
                      b"1\t2\t3\t4\t5\n",  # a field too many
                      b"1\t2\t3\t4",  # no end of line
                      b"1\t2\t3\t4\\\n"):  # a backslash escaping the end of line
            with pytest.raises(ValueError):
                encode(block, HEADER)  # type: ignore[operator]


@given(st.lists(key, min_size=1, max_size=30), st.data())
def test_stamped_runs_are_the_rows_frames_at_one_position(keys: list[bytes], data: st.DataObject) -> None:
    chunk = encode_both(b"".join(copy_row([k, None, b"v", k]) for k in keys), (0,))
    start = data.draw(st.integers(0, len(keys)))
    stop = data.draw(st.integers(start, len(keys)))
    lsn = data.draw(st.integers(0, 2**64 - 1))
    middle = data.draw(st.integers(start, stop))
    runs = [(start, middle), (middle, stop), (0, 1)]  # runs as the window leaves them, any order
    stamped = {chunk.stamp(b"schema", runs, lsn),
               rows._stamp_py(b"schema", chunk.frames, chunk.starts, runs, lsn)}
    assert len(stamped) == 1  # both implementations
    payload = stamped.pop()
    expected = b"schema" + b"".join(
        struct.pack(">Q", lsn) + chunk.frames[chunk.starts[i] + 8:chunk.starts[i + 1]]
        for a, b in runs for i in range(a, b))
    assert payload == expected
    for bad in ([(0, len(keys) + 1)], [(1, 0)], [(-1, 0)], [(0,)]):  # the C twin checks its input
        with pytest.raises((IndexError, TypeError)):
            chunk.stamp(b"", bad, 0)  # type: ignore[arg-type]
    limit = data.draw(st.integers(1, len(chunk.frames) + 1))
    end = chunk.fitting(start, limit) if start < len(keys) else None
    if end is not None:  # the longest run within the limit, at least one row
        assert end == start + 1 or chunk.starts[end] - chunk.starts[start] <= limit
        assert end == len(keys) or chunk.starts[end + 1] - chunk.starts[start] > limit
