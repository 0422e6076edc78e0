"""Golden bytes captured from PostgreSQL 15 and 18 (tools/capture_goldens.py) decode to the
expected objects; no server needed. Data: tests/data/pgoutput/, loader: tests/fixtures/fix_goldens.py.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import pytest

from pgfeed.pgoutput import UnchangedToast, decode
from pgfeed.pgoutput import messages as m
from tests.fixtures.fix_goldens import Golden

ALL_TAGS = "BCORYIUDTMSEcAbPKrp"
# Protocol versions each captured major accepts (PG15: 1-3; PG18 adds 4).
CAPTURED = {15: {1, 2, 3}, 18: {1, 2, 3, 4}}
# Every tag appears in both of these (PostgreSQL 18 needed debug_logical_replication_streaming =
# immediate to emit Stream Abort for an already-finished transaction; see the capture script).
FULL_COVERAGE = [(15, 3), (18, 4)]

CLASS_BY_TAG: dict[str, type] = {
    "B": m.BeginMessage, "C": m.CommitMessage, "O": m.OriginMessage, "R": m.RelationMessage,
    "Y": m.TypeMessage, "I": m.InsertMessage, "U": m.UpdateMessage, "D": m.DeleteMessage,
    "T": m.TruncateMessage, "M": m.LogicalMessage, "S": m.StreamStartMessage,
    "E": m.StreamStopMessage, "c": m.StreamCommitMessage, "A": m.StreamAbortMessage,
    "b": m.BeginPrepareMessage, "P": m.PrepareMessage, "K": m.CommitPreparedMessage,
    "r": m.RollbackPreparedMessage, "p": m.StreamPrepareMessage,
}


def plain(value: Any) -> Any:
    """asdict() output in the goldens' JSON form: bytes as hex, UNCHANGED_TOAST as a string."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, UnchangedToast):
        return "UNCHANGED_TOAST"
    return value


def test_golden_decodes_to_expected(golden: Golden) -> None:
    assert chr(golden.data[0]) == golden.tag
    message = decode(golden.data, in_stream=golden.in_stream)
    assert type(message) is CLASS_BY_TAG[golden.tag]
    assert plain(asdict(message)) == golden.expected
    assert decode(memoryview(golden.data), in_stream=golden.in_stream) == message


def test_every_major_and_protocol_version_was_captured(goldens: tuple[Golden, ...]) -> None:
    captured: dict[int, set[int]] = {}
    for g in goldens:
        captured.setdefault(g.pg_major, set()).add(g.proto_version)
    assert captured == CAPTURED


@pytest.mark.parametrize(("pg_major", "proto_version"), FULL_COVERAGE)
def test_every_tag_is_covered(goldens: tuple[Golden, ...], pg_major: int,
                              proto_version: int) -> None:
    tags = {g.tag for g in goldens if (g.pg_major, g.proto_version) == (pg_major, proto_version)}
    assert set(ALL_TAGS) - tags == set()
    in_stream = {g.tag for g in goldens
                 if (g.pg_major, g.proto_version) == (pg_major, proto_version) and g.in_stream}
    assert set("RYIUDTM") - in_stream == set(), "in-stream (xid-prefixed) variants"


def _features(goldens: tuple[Golden, ...]) -> set[str]:
    seen = set()
    for g in goldens:
        e = g.expected
        if g.tag == "R":
            seen.add(f"R identity {chr(e['replica_identity'])}")
        elif g.tag in "UD":
            seen.add(f"{g.tag} old {chr(e['old_kind']) if e['old_kind'] else None}")
            if "UNCHANGED_TOAST" in e.get("new_tuple", {}).get("values", ()):
                seen.add("unchanged TOAST")
        elif g.tag == "T":
            seen.add(f"T options {e['options']}")
        elif g.tag == "M":
            seen.add(f"M flags {e['flags']}")
        elif g.tag == "A":
            seen.add("A " + ("whole" if e["xid"] == e["subxid"] else "subtransaction")
                     + (" +abort_lsn" if e["abort_lsn"] is not None else ""))
    return seen


def test_variants_are_covered(goldens: tuple[Golden, ...]) -> None:
    assert _features(goldens) >= {
        "R identity d", "R identity f", "R identity n", "R identity i",
        "U old None", "U old K", "U old O", "D old K", "D old O", "unchanged TOAST",
        "T options 0", "T options 3", "M flags 0", "M flags 1",
        "A whole", "A subtransaction", "A whole +abort_lsn", "A subtransaction +abort_lsn",
    }
