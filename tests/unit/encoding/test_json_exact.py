"""Every encoding path writes a json/jsonb value exactly as PostgreSQL printed it (issue 13, item 2).

Documents come from ``jsondocs`` (numbers past 64 bits, long fractions, exponents, ``-0.0``,
unicode and control-character escapes, empty containers, whitespace, nesting past 500 levels),
each as json prints it (its own text) and as jsonb prints it (``jsonb_text``, held to a real
PostgreSQL by tests/integration/test_json_exact.py). Each run of the property puts 10,000
documents through every path: the fast JSON and protobuf transcoders (the compiled module and the
generated Python functions: the test runs on both), the reference path (values loaded, then
``change_to_dict`` + ``dumps`` / ``to_proto``), and Arrow pages (typed and generic)."""

from __future__ import annotations

import struct

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from pgfeed.encoding import transcode
from pgfeed.encoding.to_arrow import ArrowColumn, generic_batch, typed_batch
from pgfeed.encoding.to_json import change_events, change_to_dict, dumps
from pgfeed.encoding.to_proto import transaction_frames
from pgfeed_client._json import embeddable
from pgfeed_proto.v1 import feed_pb2
from tests.unit.encoding.jsondocs import documents, jsonb_text
from tests.unit.encoding.test_transcode import (
    RELID,
    decoder,
    reference_frames,
    stored,
    tuple_data,
)

COLUMNS = [("id", 20, True), ("j", 114, False), ("jb", 3802, False)]
ARROW = [ArrowColumn("id", "int8", -1, 20, key=True), ArrowColumn("j", "json", -1, 114),
         ArrowColumn("jb", "jsonb", -1, 3802)]
BATCH = 100  # documents an example; 100 examples: 10,000 documents (as json and as jsonb) a path


@pytest.fixture(params=["c", "reference"])
def implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "c" and transcode._compiled is None:
        pytest.fail("the compiled transcoder is not built (setup.py build_ext --inplace)")
    monkeypatch.setattr(transcode, "IMPLEMENTATION", request.param)
    return str(request.param)


def _embedded(text: str) -> bytes:
    return text.encode() if embeddable(text) else orjson.dumps(text)


def _proto_text(value: feed_pb2.Value) -> str:
    kind = value.WhichOneof("kind")
    assert kind in ("json_value", "null_value"), kind
    return value.json_value if kind == "json_value" else "null"


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=documents(BATCH))
def test_every_path_writes_documents_exactly(implementation: str, batch: list[str]) -> None:
    texts = [(doc, jsonb_text(doc)) for doc in batch]
    rel = struct.pack(">I", RELID)
    dec = decoder(COLUMNS)
    payload = [b"I" + rel + b"N" + tuple_data([str(i), j, jb]) for i, (j, jb) in enumerate(texts)]
    lazy = dec.decode(stored(payload))
    reference = dec.load(stored(payload))

    # JSON: the fast path (or the reference one it hands a document to) and the reference path
    fast = change_events(lazy)
    slow = [dumps(change_to_dict(c, reference)) for c in reference.changes]
    for i, ((j, jb), event, ref) in enumerate(zip(texts, fast, slow, strict=True)):
        after = b'{"id":%d,"j":%s,"jb":%s}' % (i, _embedded(j), _embedded(jb))
        assert b'"after":' + after + b',"unchanged_toast"' in event, (j, jb)
        assert event == ref

    # protobuf: json_value is the text at any depth (the document null is null_value)
    expected = [text for pair in texts for text in pair]
    for frames in (transaction_frames(lazy), reference_frames(lazy)):
        changes = [c for f in frames for c in feed_pb2.Transaction.FromString(f).changes]
        assert [_proto_text(c.after[name]) for c in changes for name in ("j", "jb")] == expected

    # Arrow: typed string columns hold the text; the generic row image embeds it as JSON does
    typed = typed_batch([reference], ARROW)
    assert [v if v is not None else "null" for pair in zip(typed.column("j").to_pylist(),
                                                           typed.column("jb").to_pylist())
            for v in pair] == expected
    generic = generic_batch([reference]).column("after").to_pylist()
    assert [a.encode() for a in generic] == [
        b'{"id":%d,"j":%s,"jb":%s}' % (i, _embedded(j), _embedded(jb))
        for i, (j, jb) in enumerate(texts)]


def test_the_issue_document_on_the_reference_path() -> None:
    """A row the fast path declines (an interval column): the document still goes out verbatim."""
    doc = '{"big": 123456789012345678901234567890, "small": 0.0000001}'
    dec = decoder([("id", 20, True), ("span", 1186, False), ("doc", 3802, False)])
    rel = struct.pack(">I", RELID)
    txn = dec.decode(stored([b"I" + rel + b"N" + tuple_data(["1", "1 day", doc])]))
    (event,) = change_events(txn)
    assert event.endswith(b'"after":{"id":1,"span":"P1D","doc":' + doc.encode()
                          + b'},"unchanged_toast":[],"origin":"o\\"rigin"}')
    (frame,) = transaction_frames(txn)
    assert feed_pb2.Transaction.FromString(frame).changes[0].after["doc"].json_value == doc
    loaded = dec.load(stored([b"I" + rel + b"N" + tuple_data(["1", "1 day", doc])]))
    assert typed_batch([loaded], [ArrowColumn("id", "int8", -1, 20, key=True),
                                  ArrowColumn("span", "interval", -1, 1186),
                                  ArrowColumn("doc", "jsonb", -1, 3802)]).column("doc").to_pylist() \
        == [doc]


def test_a_decoded_change_never_takes_json_columns_from_the_change_before_it() -> None:
    """Each run carries its relation version's json columns: after one that fell back to the
    reference path (its table's ``doc`` is jsonb), a change of a table whose ``doc`` is text is
    still a string, not a json value."""
    import dataclasses

    rel = struct.pack(">I", RELID)
    doc = '{"a": 1}'
    jsonb_table = decoder([("id", 20, True), ("span", 1186, False), ("doc", 3802, False)])
    first = jsonb_table.decode(stored([b"I" + rel + b"N" + tuple_data(["1", "1 day", doc])]))
    text_table = decoder([("id", 20, True), ("doc", 25, False)])
    second = text_table.decode(stored([b"I" + rel + b"N" + tuple_data(["2", doc])]))
    mixed = dataclasses.replace(first, changes=[*first.changes, *second.changes])
    changes = [c for f in transaction_frames(mixed)
               for c in feed_pb2.Transaction.FromString(f).changes]
    assert changes[0].after["doc"].json_value == doc
    assert changes[1].after["doc"].WhichOneof("kind") == "string_value"
    assert changes[1].after["doc"].string_value == doc
