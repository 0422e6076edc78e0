"""The wire-form fast path (``encoding.transcode``) against the reference path (load the values,
then ``change_to_dict`` + ``dumps`` / ``to_proto``): for every row change the two give the same
events, whichever path a change takes. Values are written as PostgreSQL's output functions write
them (DateStyle ISO, TimeZone UTC), plus the shapes the fast path must hand over: infinity, BC,
years past 9999, 24:00:00, unchanged TOAST, binary columns, types it does not know.

The fast path is the compiled ``_transcode`` module (the reference path is the specification);
without it (``IMPLEMENTATION == "reference"``) every change is loaded, then encoded."""

from __future__ import annotations

import json
import math
import shutil
import struct
from dataclasses import replace
from datetime import UTC, date, datetime, time
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgfeed.assembler.framing import frame
from pgfeed.assembler.model import StoredTransaction
from pgfeed.decoding.changes import TransactionDecoder
from pgfeed.decoding.model import Transaction
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.runs import Read, RowRun
from pgfeed.encoding import transcode
from pgfeed.encoding.to_json import change_events, change_to_dict, dumps
from pgfeed.encoding.to_proto import change_bytes, transaction_frames
from pgfeed.protowire import varint
from pgfeed_proto.v1 import feed_pb2
from tests.unit.encoding.jsondocs import documents, jsonb_text

RELID = 16400
COMMIT = 0x5000_0000


@pytest.fixture(autouse=True)
def implementation(monkeypatch: pytest.MonkeyPatch) -> str:
    # scripts/bootstrap installs a C compiler and builds the module: its absence is a failure
    assert transcode._compiled is not None, \
        "the compiled transcoder is not built: run ./scripts/bootstrap (needs gcc)"
    monkeypatch.setattr(transcode, "IMPLEMENTATION", "c")
    return "c"


def _compiled_only(run: Read, json: bool, middle: bytes = b"", tail: bytes = b"") -> bytes:
    """What the compiled encoder alone writes of a one-change run: ValueError when it refuses
    (the change would take the reference path)."""
    assert type(run) is RowRun and run.count == 1
    write = transcode.encoder(run.plan, run.read)
    if write is None:
        raise ValueError("no compiled encoder for this relation version")
    written, _ = write.run(run.payload, run.start, 1, run.first_seq, json, middle, tail)
    if not written:
        raise ValueError("refused: the reference path's")
    return bytes(written[0])


def json_event(run: Read, middle: bytes, tail: bytes) -> bytes:
    return _compiled_only(run, True, middle, tail)


def proto_change(run: Read) -> bytes:
    return _compiled_only(run, False)


def reference_frames(txn: Transaction[Read]) -> list[bytes]:
    """``transaction_frames`` with every change loaded, then encoded (the specification)."""
    saved = transcode.IMPLEMENTATION
    transcode.IMPLEMENTATION = "reference"
    try:
        return transaction_frames(txn)
    finally:
        transcode.IMPLEMENTATION = saved


def test_compiled_transcoder_is_built() -> None:
    """The C module is optional for installs without a compiler; scripts/bootstrap installs one,
    so here (and in CI) the build must not have skipped it silently."""
    assert shutil.which("cc") or shutil.which("gcc"), "no C compiler: run ./scripts/bootstrap"
    assert transcode._compiled is not None

# -- PostgreSQL text forms -----------------------------------------------------------------------------


def _fraction(micro: int) -> str:
    return f".{micro:06d}".rstrip("0") if micro else ""


def _date(d: date) -> str:
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


def _time(t: time) -> str:
    return f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}{_fraction(t.microsecond)}"


def _float(f: float) -> str:
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    return repr(f).removesuffix(".0") if f != 0 or math.copysign(1, f) > 0 else "-0"


_json = st.recursive(st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.text(max_size=8)
                     | st.floats(allow_nan=False, allow_infinity=False),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
def _money(cents: int) -> str:
    """money as PostgreSQL prints it with lc_monetary C: -$1,234.56."""
    sign, cents = ("-" if cents < 0 else ""), abs(cents)
    return f"{sign}${cents // 100:,}.{cents % 100:02d}"


_datetimes = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31))

# type OID -> values as PostgreSQL's output function writes them
VALUES: dict[int, st.SearchStrategy[str]] = {
    20: st.integers(-2**63, 2**63 - 1).map(str),
    21: st.integers(-2**15, 2**15 - 1).map(str),
    23: st.integers(-2**31, 2**31 - 1).map(str),
    16: st.sampled_from(["t", "f"]),
    701: st.floats().map(_float),
    700: st.floats(width=32).map(_float),
    1700: st.decimals(allow_nan=False, allow_infinity=False, places=3).map(lambda d: format(d, "f"))
    | st.sampled_from(["NaN", "Infinity", "-Infinity", "0", "-0.00"]),
    25: _text,
    1043: _text,
    2950: st.uuids().map(str),
    # json prints its input as is, jsonb as jsondocs.jsonb_text (big numbers, escapes, deep...)
    114: _json.map(lambda v: json.dumps(v, separators=(",", ":"))) | documents(1).map(lambda d: d[0]),
    3802: _json.map(json.dumps) | documents(1).map(lambda d: jsonb_text(d[0])),
    17: st.binary(max_size=12).map(lambda b: "\\x" + b.hex()),
    1082: st.dates().map(_date) | st.sampled_from(["infinity", "-infinity", "0044-03-15 BC",
                                                   "10000-01-01"]),
    1083: st.times().map(_time) | st.just("24:00:00"),
    1114: _datetimes.map(lambda d: f"{_date(d)} {_time(d.time())}")
    | st.sampled_from(["infinity", "-infinity", "0044-03-15 12:00:00 BC", "10000-01-01 00:00:00"]),
    1184: _datetimes.map(lambda d: f"{_date(d)} {_time(d.time())}+00")
    | st.sampled_from(["infinity", "0044-03-15 12:00:00+00 BC", "10000-01-01 00:00:00+00"]),
    790: st.integers(-2**63, 2**63 - 1).map(_money) | st.sampled_from(["1.000,00 €", "$1000.00"]),
    1186: st.sampled_from(["1 day 02:00:00", "-00:00:01", "1 year"]),  # interval: not fast
    1009: st.sampled_from(["{a,b}", "{}", "{NULL,\"x y\"}"]),  # text[]: not fast
}


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def relation(columns: list[tuple[str, int, bool]]) -> bytes:
    out = b"R" + struct.pack(">I", RELID) + _s("public") + _s("t%") + b"d"
    out += struct.pack(">H", len(columns))
    for name, oid, key in columns:
        out += struct.pack(">B", 1 if key else 0) + _s(name) + struct.pack(">Ii", oid, -1)
    return out


def tuple_data(values: list[str | None | bytes]) -> bytes:
    """None: 'n'; ``b"u"``: unchanged TOAST; ``b"b..."``: a binary value; str: 't'."""
    out = struct.pack(">H", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v == b"u":
            out += b"u"
        elif isinstance(v, bytes):
            out += b"b" + struct.pack(">I", len(v) - 1) + v[1:]
        else:
            raw = v.encode()
            out += b"t" + struct.pack(">I", len(raw)) + raw
    return out


@st.composite
def tables(draw: st.DrawFn, oids: list[int] | None = None) -> list[tuple[str, int, bool]]:
    oids = draw(st.lists(st.sampled_from(oids or sorted(VALUES)), min_size=1, max_size=6))
    keys = draw(st.lists(st.booleans(), min_size=len(oids), max_size=len(oids)))
    suffixes = ["", "%s", "é", ' "q']  # names the JSON and %-templates must escape
    names = [f"c{i}{draw(st.sampled_from(suffixes))}" for i in range(len(oids))]
    return list(zip(names, oids, keys))


@st.composite
def messages(draw: st.DrawFn, columns: list[tuple[str, int, bool]]) -> bytes:
    def row(kind: str) -> bytes:
        values: list[str | None | bytes] = []
        for _, oid, key in columns:
            if kind == "K" and not key:
                values.append(None)
                continue
            choice = draw(st.integers(0, 19))
            if choice == 0:
                values.append(None)
            elif choice == 1 and kind == "N":
                values.append(b"u")
            elif choice == 2:
                values.append(b"b\x00\x01")
            else:
                values.append(draw(VALUES[oid]))
        return tuple_data(values)

    rel = struct.pack(">I", RELID)
    shape = draw(st.sampled_from(["I", "UN", "UK", "UO", "DK", "DO"]))
    if shape == "I":
        return b"I" + rel + b"N" + row("N")
    if shape == "UN":
        return b"U" + rel + b"N" + row("N")
    if shape in ("UK", "UO"):
        return b"U" + rel + shape[1].encode() + row(shape[1]) + b"N" + row("N")
    return b"D" + rel + shape[1].encode() + row(shape[1])


def stored(payload_messages: list[bytes]) -> StoredTransaction:
    frames = [frame(COMMIT - 0x1000 + 0x40 * i, m) for i, m in enumerate(payload_messages)]
    return StoredTransaction(xid=77, commit_lsn=COMMIT, end_lsn=COMMIT + 8,
                             commit_ts=830_000_000_123_456, origin="o\"rigin",
                             change_count=len(frames), payload=b"".join(frames))


def decoder(columns: list[tuple[str, int, bool]], toast: str = "placeholder") -> TransactionDecoder:
    catalog = RelationCatalog()
    catalog.add(COMMIT - 0x2000, relation(columns))
    return TransactionDecoder(catalog, toast=toast)  # type: ignore[arg-type]


def _parsed(frames: list[bytes]) -> list[Any]:
    return [feed_pb2.Transaction.FromString(f) for f in frames]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), toast=st.sampled_from(["omit", "placeholder"]))
def test_fast_and_reference_paths_give_the_same_events(data: st.DataObject, toast: str) -> None:
    columns = data.draw(tables())
    payload = data.draw(st.lists(messages(columns), min_size=1, max_size=6))
    dec = decoder(columns, toast)
    reference = dec.load(stored(payload))
    lazy = dec.decode(stored(payload))
    assert all(type(c) is RowRun for c in lazy.changes)
    assert len(lazy.changes) == 1  # one relation version, every frame a row: one run

    # byte for byte: json values are PostgreSQL's text on both paths (issue 13, item 2)
    assert change_events(lazy) == [dumps(change_to_dict(c, reference)) for c in reference.changes]
    # the json columns come with the run (its relation version), on both paths
    assert [feed_pb2.Transaction.FromString(f) for f in transaction_frames(lazy)] == [
        feed_pb2.Transaction.FromString(f) for f in reference_frames(lazy)]


ALL_FAST = [("id", 20, True), ("small", 21, False), ("n", 23, False), ("flag", 16, False),
            ("f8", 701, False), ("f4", 700, False), ("amount", 1700, False), ("name", 25, False),
            ("v", 1043, False), ("u", 2950, False), ("j", 114, False), ("jb", 3802, False),
            ("raw", 17, False), ("d", 1082, False), ("t", 1083, False), ("ts", 1114, False),
            ("tstz", 1184, False), ("cash", 790, False)]
ROW = ["9000000000", "-7", "0", "t", "1e+100", "-0", "12.340", 'say "hi"\n', "héllo",
       "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", '{"a": [1, 2.50, null]}', '{"b": 1e-400}',
       "\\x00ff10", "0099-01-02", "12:00:00.5", "2026-11-22 10:00:00.000001",
       "2026-11-22 10:00:00+00", "-$1,234,567.89"]


@pytest.mark.parametrize("shape", ["I", "UN", "UK", "UO", "DK", "DO"])
def test_postgresql_shaped_rows_take_the_fast_path(shape: str) -> None:
    """Every kind the fast path knows, in each message layout: written without the reference
    path (``json_event``/``proto_change`` do not raise) and equal to it."""
    rel = struct.pack(">I", RELID)
    new, key = tuple_data(list(ROW)), tuple_data([ROW[0]] + [None] * (len(ROW) - 1))
    old = key if shape.endswith("K") else new
    message = {"I": b"I" + rel + b"N" + new, "UN": b"U" + rel + b"N" + new,
               "UK": b"U" + rel + b"K" + old + b"N" + new, "UO": b"U" + rel + b"O" + old + b"N" + new,
               "DK": b"D" + rel + b"K" + old, "DO": b"D" + rel + b"O" + old}[shape]
    dec = decoder(ALL_FAST)
    (change,) = dec.decode(stored([message])).changes
    assert isinstance(change, RowRun)
    event = orjson.loads(json_event(change, b'"commit_lsn":"0/1",', b'"origin":null}'))
    (loaded,) = change.load()
    reference = orjson.loads(dumps(change_to_dict(loaded, dec.load(stored([message])))))
    for field in ("key", "before", "after"):
        assert event.get(field) == reference.get(field)
    assert event["op"] == loaded.op and event["seq"] == 0 and event["table"] == "t%"
    if shape != "DK":
        row = event.get("after") or event["before"]
        assert row["tstz"] == "2026-11-22T10:00:00+00:00" and row["ts"] == "2026-11-22T10:00:00.000001"
        assert row["amount"] == "12.340" and row["raw"] == "AP8Q" and row["j"] == {"a": [1, 2.5, None]}
        assert row["t"] == "12:00:00.500000" and row["f4"] == 0.0 and row["id"] == 9_000_000_000
        assert row["cash"] == "-1234567.89"
    parsed = feed_pb2.Change.FromString(proto_change(change))
    assert parsed.key["id"].int_value == 9_000_000_000
    if shape != "DK":
        row = parsed.after if shape[0] != "D" else parsed.before
        assert row["tstz"].timestamp_value.seconds == _unix(datetime(2026, 11, 22, 10, tzinfo=UTC))
        assert row["ts"].local_timestamp_value.nanos == 1000
        assert row["amount"].numeric_value == "12.340" and row["flag"].bool_value is True
        assert row["jb"].json_value == '{"b": 1e-400}'  # as PostgreSQL wrote it: exact
        assert row["cash"].numeric_value == "-1234567.89"


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_without_the_compiled_encoder_every_change_takes_the_reference_path(
        data: st.DataObject, monkeypatch: pytest.MonkeyPatch) -> None:
    """The no-compiler fallback (``PGFEED_IMPL=reference``): no writers, the same events."""
    columns = data.draw(tables())
    payload = data.draw(st.lists(messages(columns), min_size=1, max_size=4))
    dec = decoder(columns)
    reference = dec.load(stored(payload))
    lazy = dec.decode(stored(payload))
    compiled = _parsed(transaction_frames(lazy))
    monkeypatch.setattr(transcode, "IMPLEMENTATION", "reference")
    assert transcode.encoder(lazy.changes[0].plan) is None  # type: ignore[union-attr]
    assert change_events(lazy) == [dumps(change_to_dict(c, reference)) for c in reference.changes]
    assert _parsed(transaction_frames(lazy)) == compiled


def _unix(at: datetime) -> int:
    delta = at - datetime(1970, 1, 1, tzinfo=UTC)
    return delta.days * 86400 + delta.seconds


def test_rows_the_fast_path_cannot_write_are_loaded() -> None:
    """Unchanged TOAST, a binary column, a type it does not know: the reference path writes
    them (the fast functions raise), and the page still comes out whole and in order."""
    rel = struct.pack(">I", RELID)
    columns = [("id", 20, True), ("body", 25, False)]
    toast = b"U" + rel + b"N" + tuple_data(["1", b"u"])
    plain = b"I" + rel + b"N" + tuple_data(["2", "x"])
    dec = decoder(columns)
    lazy = dec.decode(stored([toast, plain]))
    (run,) = lazy.changes  # one run: the compiled encoder hands the first change over, then on
    assert type(run) is RowRun and run.count == 2
    toast_alone = dec.decode(stored([toast]))
    with pytest.raises(ValueError):
        json_event(toast_alone.changes[0], b"", b"}")
    events = [orjson.loads(e) for e in change_events(lazy)]
    assert [e["key"] for e in events] == [{"id": 1}, {"id": 2}]
    assert events[0]["unchanged_toast"] == ["body"]
    assert events[0]["after"]["body"] == "__pgfeed_unchanged_toast__"

    interval = decoder([("id", 20, True), ("span", 1186, False)])
    (change,) = interval.decode(stored([b"I" + rel + b"N" + tuple_data(["3", "1 day"])])).changes
    with pytest.raises(ValueError):
        proto_change(change)
    (event,) = change_events(interval.decode(stored([b"I" + rel + b"N" + tuple_data(["3", "1 day"])])))
    assert orjson.loads(event)["after"] == {"id": 3, "span": "P1D"}


def test_deeply_nested_json_is_left_to_the_reference_path() -> None:
    """A page must stay parseable: json nested past a client parser's depth limit (orjson: 1024)
    is not pasted into it."""
    rel = struct.pack(">I", RELID)
    deep = "[" * 2000 + "]" * 2000
    dec = decoder([("id", 20, True), ("doc", 3802, False)])
    txn = dec.decode(stored([b"I" + rel + b"N" + tuple_data(["1", deep])]))
    with pytest.raises(ValueError):
        json_event(txn.changes[0], b"", b"}")
    (event,) = change_events(txn)
    assert orjson.loads(event)["after"]["id"] == 1  # whatever the reference wrote, it parses


def test_reselect_mode_fills_unchanged_toast_on_the_reference_path() -> None:
    """toast=reselect takes values from the fill index by position, so rows stay in wire form:
    plain ones are transcoded, one with unchanged TOAST is loaded and filled, on JSON and proto."""
    rel = struct.pack(">I", RELID)
    dec = decoder([("id", 20, True), ("doc", 3802, False), ("body", 25, False)], toast="reselect")
    dec.loading = replace(dec.loading, fills=lambda commit_lsn, seq: {
        "doc": (3802, '{"n": 1e-7}')} if (commit_lsn, seq) == (COMMIT, 1) else {})
    txn = dec.decode(stored([b"I" + rel + b"N" + tuple_data(["1", "{}", "b"]),
                             b"U" + rel + b"N" + tuple_data(["1", b"u", b"u"])]))
    assert all(type(c) is RowRun for c in txn.changes)
    plain, toasted = (orjson.loads(e) for e in change_events(txn))
    assert "toast_filled" not in plain and plain["after"] == {"id": 1, "doc": {}, "body": "b"}
    assert toasted["unchanged_toast"] == ["doc", "body"] and toasted["toast_filled"] == ["doc"]
    assert toasted["after"]["id"] == 1 and "body" not in toasted["after"]
    assert json.loads(json.dumps(toasted["after"]["doc"])) == {"n": 1e-7}
    (raw,) = transaction_frames(txn)
    pb = feed_pb2.Transaction.FromString(raw)
    assert list(pb.changes[1].toast_filled) == ["doc"] and "body" not in pb.changes[1].after


def test_fast_path_handles_values_exactly() -> None:
    """Seconds since 1970 for old and new timestamps (Python's datetime arithmetic is the
    reference), microseconds, and numerics that do not fit a double."""
    rel = struct.pack(">I", RELID)
    dec = decoder([("id", 20, True), ("at", 1184, False), ("amount", 1700, False)])
    for stamp, amount in (("1900-02-28 23:59:59.999999+00", "12345678901234567890.123456789"),
                          ("0001-01-01 00:00:00+00", "-0.000001"),
                          ("2262-04-11 23:47:16.85+00", "NaN")):
        (change,) = dec.decode(stored([b"I" + rel + b"N" + tuple_data(["1", stamp, amount])])).changes
        expected = datetime.fromisoformat(stamp.replace(" ", "T") + ":00")
        after = feed_pb2.Change.FromString(proto_change(change)).after
        assert after["at"].timestamp_value.seconds == _unix(expected)
        assert after["at"].timestamp_value.nanos == expected.microsecond * 1000
        assert after["amount"].numeric_value == amount
        event = orjson.loads(json_event(change, b"", b'"origin":null}'))
        assert event["after"] == {"id": 1, "at": expected.isoformat(), "amount": amount}


def test_wide_rows_and_long_values() -> None:
    """Past the compiled encoder's stack buffers: 100 columns (its column arrays) and values of
    hundreds of kilobytes (its output buffer), in both formats."""
    rel = struct.pack(">I", RELID)
    columns = [("id", 20, True)] + [(f"c{i}", 25, False) for i in range(99)] + [("b", 17, False)]
    values: list[str | None | bytes] = ["1"] + [f"v{i}" * (i * 40) for i in range(99)]
    values.append("\\x" + bytes(range(256)).hex() * 300)
    message = b"U" + rel + b"O" + tuple_data(values) + b"N" + tuple_data(values)
    dec = decoder(columns)
    lazy, reference = dec.decode(stored([message])), dec.load(stored([message]))
    event = orjson.loads(json_event(lazy.changes[0], b"", b'"origin":null}'))
    expected = orjson.loads(dumps(change_to_dict(reference.changes[0], reference)))
    assert event["before"] == event["after"] == expected["after"]
    assert len(event["after"]["c98"]) == 2 * 98 * 40 + 98 * 40
    parsed = feed_pb2.Change.FromString(proto_change(lazy.changes[0]))
    assert parsed.after["b"].bytes_value == bytes(range(256)) * 300
    assert _parsed(transaction_frames(lazy)) == _parsed(reference_frames(lazy))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_broken_bytes_raise_and_never_crash(data: st.DataObject) -> None:
    """Truncated or corrupted messages (a damaged log) make the fast path hand over (ValueError)
    and never read past the buffer; what it does write, the reference path agrees with.

    json/jsonb are left out: the fast path passes PostgreSQL's json text through unparsed, so a
    damaged document would be written as it is (a known limit, docs/design.md)."""
    columns = data.draw(tables([oid for oid in VALUES if oid not in (114, 3802)]))
    message = bytearray(data.draw(messages(columns)))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(1, len(message) - 1)) if len(message) > 1 else 1
        if data.draw(st.booleans()):
            del message[at:]
        else:
            message[at - 1] = data.draw(st.integers(0, 255))
    message += data.draw(st.binary(max_size=3))
    dec = decoder(columns)
    framed = frame(COMMIT - 64, bytes(message))
    change = RowRun(framed, 0, len(framed), 0, 1, dec._plan(RELID, COMMIT, 0), False, COMMIT,
                    dec.loading)
    try:
        (reference,) = change.load()
    except Exception:
        reference = None
    fields = ("lsn", "seq", "op", "schema", "table", "key", "before", "after")
    try:
        event = orjson.loads(json_event(change, b"", b'"origin":null}'))
    except ValueError:
        event = None
    if event is not None and reference is not None:
        expected = orjson.loads(dumps(change_to_dict(reference, dec.load(stored([])))))
        assert {k: event.get(k) for k in fields} == {k: expected.get(k) for k in fields}, message
    try:
        body = proto_change(change)
    except ValueError:
        return
    if reference is not None:
        kinds = change.plan.json_kinds or None
        assert _parsed([_frame(body)]) == _parsed([_frame(change_bytes(reference, kinds))]), message


def _frame(change: bytes) -> bytes:
    """One serialized Change as a Transaction frame holding it (for ``_parsed``)."""
    return b"\x32" + varint(len(change)) + change
