"""The one walk of stored payload frames (``framing.walk``) and its compiled run step
(``framing.extent``, ``_framing.c``), held to the Python walk it stands for."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from pgfeed.assembler import framing
from pgfeed.assembler.framing import frame, walk


@st.composite
def payloads(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """Frames of row changes (and other messages) of a few relations, and their offsets."""
    out, offsets = b"", []
    for _ in range(draw(st.integers(0, 12))):
        tag = draw(st.sampled_from(b"IUDRTM"))
        body = struct.pack(">I", draw(st.sampled_from([1, 2, 16384])))[:draw(st.integers(0, 4))]
        body += draw(st.binary(max_size=6))
        offsets.append(len(out))
        out += frame(draw(st.integers(0, 1 << 40)), bytes([tag]) + body)
    return out, offsets


def test_walk_gives_each_frame_its_position_and_bounds() -> None:
    payload = frame(0x10, b"I\x00\x00\x00\x01N") + frame(0x20, b"M") + frame(0x30, b"")
    assert [(at, lsn, payload[start:stop]) for at, lsn, start, stop in walk(payload)] == [
        (0, 0x10, b"I\x00\x00\x00\x01N"), (18, 0x20, b"M"), (31, 0x30, b"")]
    assert [at for at, *_ in walk(payload, 18, 31)] == [18]


@settings(max_examples=400, deadline=None)
@given(data=st.data(), built=payloads())
def test_compiled_extent_equals_the_python_walk(data: st.DataObject,
                                                built: tuple[bytes, list[int]]) -> None:
    payload, offsets = built
    if framing._framing is None:  # no compiler: the Python walk is the one used
        return
    pos = data.draw(st.sampled_from([*offsets, len(payload)]))
    end = data.draw(st.sampled_from([o for o in [*offsets, len(payload)] if o >= pos]))
    relation_id = data.draw(st.sampled_from([1, 2, 16384]))
    limit = data.draw(st.integers(0, 14))
    tags = bytes(data.draw(st.sets(st.sampled_from(b"IUD"))))
    assert framing._framing.extent(payload, pos, end, relation_id, limit, tags) == \
        framing._extent(payload, pos, end, relation_id, limit, tags)
