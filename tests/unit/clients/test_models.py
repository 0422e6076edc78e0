"""The client's JSON decoding: every field of a change event lands on its attribute, and pages are
parsed with the cyclic GC paused but never left paused (or turned on when the caller had it off)."""

from __future__ import annotations

import base64
import dataclasses
import gc
from datetime import UTC, datetime

import orjson
import pytest

from pgfeed_client._http_base import decode
from pgfeed_client._models import Change, Page, Transaction

EVENT = {
    "lsn": "0/10", "seq": 3, "commit_lsn": "0/20", "xid": 7,
    "commit_ts": "2026-11-23T12:00:00.5+00:00", "op": "message", "schema": "s", "table": "t",
    "key": {"id": 1}, "before": {"id": 0}, "after": {"id": 1}, "unchanged_toast": ["big"],
    "origin": "up", "prefix": "p", "content": base64.b64encode(b"\x00hi").decode(),
    "transactional": True, "tables": ["s.t"], "options": {"cascade": True},
    "toast_filled": ["big2"], "table_version": 4, "json_null": {"after": ["doc"]},
    "ddl": {"command": "ALTER TABLE", "table": "s.t", "columns": []},
}


def test_every_event_field_lands_on_its_attribute() -> None:
    change = Change.from_json(EVENT)
    expected = {**EVENT, "commit_ts": datetime(2026, 11, 23, 12, 0, 0, 500000, tzinfo=UTC),
                "content": b"\x00hi"}
    assert {f.name for f in dataclasses.fields(Change)} == set(EVENT)
    assert {name: getattr(change, name) for name in EVENT} == expected


def test_missing_optional_fields_take_their_defaults() -> None:
    change = Change.from_json({"lsn": "0/10", "seq": 0, "commit_lsn": "0/10", "op": "insert"})
    assert (change.xid, change.commit_ts, change.after, change.unchanged_toast, change.content) == (
        0, None, None, [], None)


def test_decode_builds_with_the_gc_paused_and_restores_it() -> None:
    body = orjson.dumps({"changes": [EVENT], "next": "0/20", "head": "0/20", "has_more": False})
    seen = []

    def build(d: dict) -> Page:
        seen.append(gc.isenabled())
        return Page.from_json(d)

    assert gc.isenabled()
    page = decode(body, build)
    assert seen == [False] and gc.isenabled()
    assert page.next == "0/20" and page.changes[0].content == b"\x00hi"
    gc.disable()
    try:
        decode(body, build)
        assert not gc.isenabled()  # the caller's choice is kept
    finally:
        gc.enable()


def test_decode_restores_the_gc_when_the_body_is_broken() -> None:
    with pytest.raises(orjson.JSONDecodeError):
        decode(b'{"changes": [')
    with pytest.raises(KeyError):
        decode(b'{"changes": []}', Page.from_json)  # no "next"
    assert gc.isenabled()


def test_decode_of_an_empty_body_is_none() -> None:
    assert decode(b"") is None
    assert decode(b"{}") == {}


def test_transactions_decode_their_changes() -> None:
    txn = Transaction.from_json({"xid": 7, "commit_lsn": "0/20", "changes": [EVENT, EVENT]})
    assert [c.seq for c in txn.changes] == [3, 3] and txn.change_count == 2
