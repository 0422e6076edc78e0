"""The pure Debezium encoder on hand-made native events: ops the workload test cannot make yet
(``read`` from a backfill), FULL-identity key changes, omitted TOAST columns, bad input."""

import pytest

from pgfeed.encoding.to_debezium import UNAVAILABLE, DebeziumSource, envelopes, op_code

SRC = DebeziumSource(name="shop", db="app", version="0.1.0")
BASE = {"lsn": "0/16B1A20", "seq": 3, "commit_lsn": "0/16B1B00", "xid": 749,
        "commit_ts": "2026-11-22T10:00:00.123456+00:00", "schema": "public", "table": "orders",
        "origin": None}


def test_read_is_r_and_a_snapshot_row():
    (env,) = envelopes({**BASE, "op": "read", "key": {"id": 1}, "after": {"id": 1, "v": 2},
                        "unchanged_toast": []}, SRC)
    assert env["op"] == "r" and env["before"] is None and env["after"] == {"id": 1, "v": 2}
    assert env["source"]["snapshot"] == "true" and env["source"]["lsn"] == 0x16B1A20
    assert env["ts_ms"] == 1795341600123 and env["source"]["ts_us"] == 1795341600123456


def test_full_identity_key_change_stays_one_update():
    (env,) = envelopes({**BASE, "op": "update", "key": {"id": 1, "v": 1},
                        "before": {"id": 1, "v": 1}, "after": {"id": 2, "v": 1},
                        "unchanged_toast": []}, SRC)
    assert env["op"] == "u" and env["before"] == {"id": 1, "v": 1}


def test_omitted_and_filled_toast_columns():
    (env,) = envelopes({**BASE, "op": "update", "key": {"id": 1}, "after": {"id": 1, "t": "x"},
                        "unchanged_toast": ["big", "t"], "toast_filled": ["t"]}, SRC)
    assert env["after"] == {"id": 1, "t": "x", "big": UNAVAILABLE}


def test_unknown_op_is_refused():
    assert [op_code(o) for o in ("insert", "update", "delete", "read", "truncate", "message")] \
        == list("cudrtm")
    with pytest.raises(ValueError, match="no Debezium op"):
        op_code("begin")
