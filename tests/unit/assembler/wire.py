"""Tiny pgoutput message builders for assembler tests (v1-v4 layouts; xid prefix in streams)."""

from __future__ import annotations

import struct


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _x(xid: int | None) -> bytes:
    return b"" if xid is None else struct.pack(">I", xid)


def tuple_data(*values: str | None) -> bytes:
    out = struct.pack(">H", len(values))
    for v in values:
        if v is None:
            out += b"n"
        else:
            raw = v.encode()
            out += b"t" + struct.pack(">I", len(raw)) + raw
    return out


def begin(xid: int, final_lsn: int, ts: int = 1000) -> bytes:
    return b"B" + struct.pack(">QqI", final_lsn, ts, xid)


def commit(commit_lsn: int, end_lsn: int, ts: int = 1000) -> bytes:
    return b"C" + struct.pack(">BQQq", 0, commit_lsn, end_lsn, ts)


def origin(name: str, lsn: int = 0) -> bytes:
    return b"O" + struct.pack(">Q", lsn) + _s(name)


def relation(relid: int, name: str = "t", cols: tuple[str, ...] = ("id",), xid: int | None = None,
             namespace: str = "public") -> bytes:
    out = b"R" + _x(xid) + struct.pack(">I", relid) + _s(namespace) + _s(name) + b"d"
    out += struct.pack(">H", len(cols))
    for i, c in enumerate(cols):
        out += struct.pack(">B", 1 if i == 0 else 0) + _s(c) + struct.pack(">Ii", 23, -1)
    return out


def type_(oid: int, name: str = "mood", xid: int | None = None) -> bytes:
    return b"Y" + _x(xid) + struct.pack(">I", oid) + _s("public") + _s(name)


def insert(relid: int, *values: str | None, xid: int | None = None) -> bytes:
    return b"I" + _x(xid) + struct.pack(">I", relid) + b"N" + tuple_data(*values)


def update(relid: int, *values: str | None, xid: int | None = None) -> bytes:
    return b"U" + _x(xid) + struct.pack(">I", relid) + b"N" + tuple_data(*values)


def delete(relid: int, *values: str | None, xid: int | None = None) -> bytes:
    return b"D" + _x(xid) + struct.pack(">I", relid) + b"K" + tuple_data(*values)


def truncate(*relids: int, options: int = 0, xid: int | None = None) -> bytes:
    return b"T" + _x(xid) + struct.pack(">IB", len(relids), options) + b"".join(
        struct.pack(">I", r) for r in relids)


def message(prefix: str, content: bytes, *, transactional: bool, lsn: int,
            xid: int | None = None) -> bytes:
    return (b"M" + _x(xid) + struct.pack(">BQ", 1 if transactional else 0, lsn) + _s(prefix)
            + struct.pack(">I", len(content)) + content)


def stream_start(xid: int, first: bool) -> bytes:
    return b"S" + struct.pack(">IB", xid, 1 if first else 0)


def stream_stop() -> bytes:
    return b"E"


def stream_commit(xid: int, commit_lsn: int, end_lsn: int, ts: int = 2000) -> bytes:
    return b"c" + struct.pack(">IBQQq", xid, 0, commit_lsn, end_lsn, ts)


def stream_abort(xid: int, subxid: int) -> bytes:
    return b"A" + struct.pack(">II", xid, subxid)


def begin_prepare(xid: int, gid: str, prepare_lsn: int, end_lsn: int, ts: int = 3000) -> bytes:
    return b"b" + struct.pack(">QQqI", prepare_lsn, end_lsn, ts, xid) + _s(gid)


def prepare(xid: int, gid: str, prepare_lsn: int, end_lsn: int, ts: int = 3000) -> bytes:
    return b"P" + struct.pack(">BQQqI", 0, prepare_lsn, end_lsn, ts, xid) + _s(gid)


def stream_prepare(xid: int, gid: str, prepare_lsn: int, end_lsn: int, ts: int = 3000) -> bytes:
    return b"p" + struct.pack(">BQQqI", 0, prepare_lsn, end_lsn, ts, xid) + _s(gid)


def commit_prepared(xid: int, gid: str, commit_lsn: int, end_lsn: int, ts: int = 4000) -> bytes:
    return b"K" + struct.pack(">BQQqI", 0, commit_lsn, end_lsn, ts, xid) + _s(gid)


def rollback_prepared(xid: int, gid: str, prepare_end_lsn: int, rollback_end_lsn: int) -> bytes:
    return b"r" + struct.pack(">BQQqqI", 0, prepare_end_lsn, rollback_end_lsn, 3000, 5000,
                              xid) + _s(gid)
