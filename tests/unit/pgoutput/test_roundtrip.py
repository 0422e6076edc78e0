"""Property: for every pgoutput message type (and in-stream variant), decode(encode(m)) == m."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pgfeed.pgoutput import UNCHANGED_TOAST, decode
from pgfeed.pgoutput import messages as pm
from pgfeed.pgoutput.encode import encode

u8 = st.integers(0, 0xFF)
u32 = st.integers(0, 0xFFFF_FFFF)
i32 = st.integers(-(2**31), 2**31 - 1)
lsn = st.integers(0, 2**64 - 1)
ts = st.integers(-(2**63), 2**63 - 1)
# pq_sendstring: no NUL inside; UTF-8 encodable (no lone surrogates).
cstring = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)),
                  max_size=20)
text_value = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
value = st.one_of(st.none(), st.just(UNCHANGED_TOAST), text_value, st.binary(max_size=30))
tuples = st.builds(pm.TupleData, st.lists(value, max_size=8).map(tuple))
streamed = st.booleans()


def streamed_xid(draw: st.DrawFn) -> tuple[int | None, bool]:
    in_stream = draw(streamed)
    return (draw(u32) if in_stream else None), in_stream


@st.composite
def messages(draw: st.DrawFn) -> tuple[pm.Message, bool]:
    kind = draw(st.sampled_from([
        "B", "C", "O", "R", "Y", "I", "U", "D", "T", "M", "S", "E", "c", "A", "b", "P", "K",
        "r", "p",
    ]))
    xid, in_stream = streamed_xid(draw)
    m: pm.Message
    match kind:
        case "B":
            m = pm.BeginMessage(draw(lsn), draw(ts), draw(u32))
        case "C":
            m = pm.CommitMessage(draw(u8), draw(lsn), draw(lsn), draw(ts))
        case "O":
            m = pm.OriginMessage(draw(lsn), draw(cstring))
        case "R":
            cols = st.builds(pm.RelationColumn, u8, cstring, u32, i32)
            m = pm.RelationMessage(xid, draw(u32), draw(cstring), draw(cstring), draw(u8),
                                   tuple(draw(st.lists(cols, max_size=6))))
        case "Y":
            m = pm.TypeMessage(xid, draw(u32), draw(cstring), draw(cstring))
        case "I":
            m = pm.InsertMessage(xid, draw(u32), draw(tuples))
        case "U":
            old_kind = draw(st.sampled_from([None, ord("K"), ord("O")]))
            old = None if old_kind is None else draw(tuples)
            m = pm.UpdateMessage(xid, draw(u32), old_kind, old, draw(tuples))
        case "D":
            m = pm.DeleteMessage(xid, draw(u32), draw(st.sampled_from([ord("K"), ord("O")])),
                                 draw(tuples))
        case "T":
            m = pm.TruncateMessage(xid, draw(u8), tuple(draw(st.lists(u32, max_size=6))))
        case "M":
            m = pm.LogicalMessage(xid, draw(u8), draw(lsn), draw(cstring),
                                  draw(st.binary(max_size=40)))
        case "S":
            m = pm.StreamStartMessage(draw(u32), draw(st.booleans()))
        case "E":
            m = pm.StreamStopMessage()
        case "c":
            m = pm.StreamCommitMessage(draw(u32), draw(u8), draw(lsn), draw(lsn), draw(ts))
        case "A":
            if draw(st.booleans()):
                m = pm.StreamAbortMessage(draw(u32), draw(u32), draw(lsn), draw(ts))
            else:
                m = pm.StreamAbortMessage(draw(u32), draw(u32))
        case "b":
            m = pm.BeginPrepareMessage(draw(lsn), draw(lsn), draw(ts), draw(u32), draw(cstring))
        case "P":
            m = pm.PrepareMessage(draw(u8), draw(lsn), draw(lsn), draw(ts), draw(u32),
                                  draw(cstring))
        case "K":
            m = pm.CommitPreparedMessage(draw(u8), draw(lsn), draw(lsn), draw(ts), draw(u32),
                                         draw(cstring))
        case "r":
            m = pm.RollbackPreparedMessage(draw(u8), draw(lsn), draw(lsn), draw(ts), draw(ts),
                                           draw(u32), draw(cstring))
        case _:
            m = pm.StreamPrepareMessage(draw(u8), draw(lsn), draw(lsn), draw(ts), draw(u32),
                                        draw(cstring))
    has_xid = kind in "RYIUDTM"
    return m, in_stream and has_xid


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(messages())
def test_decode_encode_roundtrip(sample: tuple[pm.Message, bool]) -> None:
    msg, in_stream = sample
    buf = encode(msg, in_stream=in_stream)
    assert decode(buf, in_stream=in_stream) == msg
    assert decode(memoryview(buf), in_stream=in_stream) == msg
