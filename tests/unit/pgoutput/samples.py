"""One or more sample messages per pgoutput message type (and in-stream variant), for tests."""

from __future__ import annotations

from pgfeed.pgoutput.messages import (
    UNCHANGED_TOAST,
    BeginMessage,
    BeginPrepareMessage,
    CommitMessage,
    CommitPreparedMessage,
    DeleteMessage,
    InsertMessage,
    LogicalMessage,
    Message,
    OriginMessage,
    PrepareMessage,
    RelationColumn,
    RelationMessage,
    RollbackPreparedMessage,
    StreamAbortMessage,
    StreamCommitMessage,
    StreamPrepareMessage,
    StreamStartMessage,
    StreamStopMessage,
    TruncateMessage,
    TupleData,
    TypeMessage,
    UpdateMessage,
)

ROW = TupleData(("42", None, UNCHANGED_TOAST, "naïve €", b"\x00\x01", ""))
KEY = TupleData(("42",))

# (message, in_stream) pairs covering every message type and every in-stream variation.
SAMPLES: list[tuple[Message, bool]] = [
    (BeginMessage(0x16_B374D848, 817_000_000_123_456, 749), False),
    (CommitMessage(0, 0x16_B374D848, 0x16_B374D900, 817_000_000_123_456), False),
    (OriginMessage(0x1_00000000, "node_a"), False),
    (RelationMessage(None, 16384, "public", "orders", ord("d"),
                     (RelationColumn(1, "id", 23, -1), RelationColumn(0, "note", 25, -1))), False),
    (RelationMessage(749, 16384, "", "t", ord("f"), (RelationColumn(1, "a", 23, -1),)), True),
    (TypeMessage(None, 70001, "public", "mood"), False),
    (TypeMessage(749, 70001, "public", "mood"), True),
    (InsertMessage(None, 16384, ROW), False),
    (InsertMessage(749, 16384, ROW), True),
    (UpdateMessage(None, 16384, None, None, ROW), False),
    (UpdateMessage(None, 16384, ord("K"), KEY, ROW), False),
    (UpdateMessage(749, 16384, ord("O"), ROW, ROW), True),
    (DeleteMessage(None, 16384, ord("K"), KEY), False),
    (DeleteMessage(749, 16384, ord("O"), ROW), True),
    (TruncateMessage(None, 3, (16384, 16390)), False),
    (TruncateMessage(749, 1, (16384,)), True),
    (LogicalMessage(None, 0, 0x16_B374D848, "pgfeed.heartbeat", b""), False),
    (LogicalMessage(749, 1, 0x16_B374D848, "app", b"\x00payload\xff"), True),
    (StreamStartMessage(749, True), False),
    (StreamStopMessage(), True),
    (StreamCommitMessage(749, 0, 0x16_B374D848, 0x16_B374D900, 817_000_000_123_456), False),
    (StreamAbortMessage(749, 750), False),
    (StreamAbortMessage(749, 749, 0x16_B374D848, 817_000_000_123_456), False),
    (BeginPrepareMessage(0x16_B374D848, 0x16_B374D900, 817_000_000_123_456, 749, "gid-1"), False),
    (PrepareMessage(0, 0x16_B374D848, 0x16_B374D900, 817_000_000_123_456, 749, "gid-1"), False),
    (CommitPreparedMessage(0, 0x16_B374D848, 0x16_B374D900, 817_000_000_123_456, 749, "g"),
     False),
    (RollbackPreparedMessage(0, 0x16_B374D848, 0x16_B374D900, 817_000_000_123_456,
                             817_000_000_999_999, 749, "g"), False),
    (StreamPrepareMessage(0, 0x16_B374D848, 0x16_B374D900, 817_000_000_123_456, 749, "gid-1"),
     False),
]
