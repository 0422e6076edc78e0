"""The compiled typed-Arrow rows (``encoding.arrow_rows``, ``_transcode_arrow.c``) against the
reference typed read (``to_arrow.typed_batch`` over loaded changes): for generated tables,
values and message layouts (test_transcode's generators: PostgreSQL's text forms plus the
shapes that must take the reference path: infinity, BC, years past 9999, 24:00:00, NaN,
unchanged TOAST, binary columns, types the C code does not know), the batches a page decoded
into an ``ArrowSink`` gives hold exactly the reference's rows, value by value (floats bit by
bit), in the same order, whatever mix of compiled and reference changes it took."""

from __future__ import annotations

import itertools
import math
import struct
import threading
import time
from dataclasses import replace
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgfeed.assembler.model import BACKFILL_ORIGIN, StoredTransaction
from pgfeed.decoding.changes import TransactionDecoder
from pgfeed.decoding.model import Change, Op
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.runs import loaded
from pgfeed.encoding import arrow_rows
from pgfeed.encoding.to_arrow import ArrowColumn, typed_batch, typed_schema
from pgfeed.errors import DecodeError
from tests.unit.encoding.test_transcode import (
    ALL_FAST,
    COMMIT,
    RELID,
    VALUES,
    _s,
    stored,
    tuple_data,
)
from tests.unit.encoding.test_transcode import (
    ROW as ALL_ROW,
)

OTHER = RELID + 1  # a second table in the same transactions (the typed read filters it out)
NUMERIC_12_3 = ((12 << 16) | 3) + 4
NUMERIC_38_3 = ((38 << 16) | 3) + 4

Column = tuple[str, int, bool, int]  # name, type oid, key, typmod


def _element(text: str | None) -> str:
    """An array element as PostgreSQL's array_out writes it: quoted when it must be."""
    if text is None:
        return "NULL"
    if text == "" or text.upper() == "NULL" or any(ch in text for ch in '{}",\\ \t\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _array(element_oid: int) -> st.SearchStrategy[str]:
    items = st.lists(st.none() | VALUES[element_oid], max_size=4)
    return (items.map(lambda xs: "{" + ",".join(_element(x) for x in xs) + "}")
            | st.sampled_from(["{{1,2},{3,4}}", "[0:1]={1,2}"]))  # the reference's: null


# array type oid -> array texts of generated elements (and shapes the reference nulls)
ARRAYS = {1007: _array(23), 1016: _array(20), 1005: _array(21), 1022: _array(701),
          1021: _array(700), 1231: _array(1700), 1000: _array(16), 1009: _array(25),
          1015: _array(1043), 1182: _array(1082), 1115: _array(1114), 1185: _array(1184),
          1001: _array(17), 2951: _array(2950), 1183: _array(1083), 3807: _array(3802)}
ALL_VALUES = {**VALUES, **ARRAYS}


def relation(relid: int, table: str, columns: list[Column]) -> bytes:
    out = b"R" + struct.pack(">I", relid) + _s("public") + _s(table) + b"d"
    out += struct.pack(">H", len(columns))
    for name, oid, key, typmod in columns:
        out += struct.pack(">B", 1 if key else 0) + _s(name) + struct.pack(">Ii", oid, typmod)
    return out


def setup(columns: list[Column], toast: str = "omit") -> tuple[TransactionDecoder, list[ArrowColumn]]:
    catalog = RelationCatalog()
    catalog.add(COMMIT - 0x2000, relation(RELID, "t", columns))
    catalog.add(COMMIT - 0x2000, relation(OTHER, "other", [("x", 20, True, -1)]))
    arrow = [ArrowColumn(n, None, m, o, k) for n, o, k, m in columns]  # named by OID
    return TransactionDecoder(catalog, toast=toast), arrow  # type: ignore[arg-type]


def _exact(v: Any) -> Any:
    """A value compared exactly: floats by their bits (NaN, -0.0), containers element-wise."""
    if isinstance(v, float):
        return ("float", struct.pack("<d", v)) if not math.isnan(v) else ("nan",)
    if isinstance(v, dict):
        return {k: _exact(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_exact(x) for x in v]
    return v


def rows(batches: list[pa.RecordBatch], schema: pa.Schema) -> list[Any]:
    for b in batches:
        assert b.schema == schema
        b.validate(full=True)
    return [_exact(r) for r in pa.Table.from_batches(batches, schema).to_pylist()]


class Segment:
    """``rows`` consecutive rows the sink wrote to its compiled columns."""

    def __init__(self, rows: int) -> None:
        self.rows = rows


def both(dec: TransactionDecoder, arrow: list[ArrowColumn], txn: StoredTransaction,
         **kw: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """(reference rows, compiled rows, the compiled page's changes)."""
    schema = typed_schema(arrow)
    tables = {"public.t"}
    reference = dec.load(txn, tables=tables, **kw)
    expected = rows([typed_batch([reference], arrow, schema)], schema)
    sink = arrow_rows.sink_for(arrow, schema)
    if sink is None:  # an Arrow type the C code never writes (lists): the reference's, whole
        assert any(pa.types.is_list(schema.field(c.name).type) for c in arrow)
        return expected, expected, list(reference.changes)
    compiled = dec.decode(txn, tables=tables, **kw)
    assert compiled.last_seq == reference.last_seq
    written = sink.write([compiled])
    # the page's shape: counts of compiled rows (Segment) and the reference's changes, in order
    shape = [Segment(x) if type(x) is int else x for _t, items in written for x in items]
    return expected, rows(sink.assemble(written), schema), shape


@st.composite
def tables(draw: st.DrawFn) -> list[Column]:
    oids = draw(st.lists(st.sampled_from(sorted(ALL_VALUES)), min_size=1, max_size=6))
    keys = [draw(st.booleans()) and o not in ARRAYS for o in oids]
    # numeric(38,3) holds the generated values as they are, numeric(38,6) scales them up
    typmods = [draw(st.sampled_from([-1, NUMERIC_38_3, ((38 << 16) | 6) + 4])) if o in (1700, 1231)
               else -1
               for o in oids]
    return [(f"c{i}", o, k, m) for i, (o, k, m) in enumerate(zip(oids, keys, typmods))]


@st.composite
def messages(draw: st.DrawFn, columns: list[tuple[str, int, bool]]) -> bytes:
    """test_transcode's messages without binary ('b') columns: pgfeed never asks pgoutput for
    them, and the reference's typed rows for them depend on the rest of their batch (bytes in a
    string column: as is next to strings, base64 next to values it must convert)."""
    def row(kind: str) -> bytes:
        values: list[str | None | bytes] = []
        for _, oid, key in columns:
            choice = draw(st.integers(0, 19))
            if (kind == "K" and not key) or choice == 0:
                values.append(None)
            elif choice == 1 and kind == "N":
                values.append(b"u")
            else:
                values.append(draw(ALL_VALUES[oid]))
        return tuple_data(values)

    rel = struct.pack(">I", RELID)
    shape = draw(st.sampled_from(["I", "UN", "UK", "UO", "DK", "DO"]))
    if shape in ("I", "UN"):
        return shape[0].encode() + rel + b"N" + row("N")
    if shape in ("UK", "UO"):
        return b"U" + rel + shape[1].encode() + row(shape[1]) + b"N" + row("N")
    return b"D" + rel + shape[1].encode() + row(shape[1])


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), toast=st.sampled_from(["omit", "placeholder", "reselect"]),
       backfill=st.booleans(), ops=st.sampled_from([None, {Op.INSERT}, {Op.UPDATE, Op.DELETE},
                                                    {Op.READ}]))
def test_compiled_rows_equal_the_reference(data: st.DataObject, toast: str, backfill: bool,
                                           ops: set[Op] | None) -> None:
    columns = data.draw(tables())
    plain = [(n, o, k) for n, o, k, _ in columns]
    payload = data.draw(st.lists(messages(plain), min_size=1, max_size=8))
    other = b"I" + struct.pack(">I", OTHER) + b"N" + tuple_data(["5"])
    at = data.draw(st.integers(0, len(payload)))
    payload.insert(at, other)  # another table's change between this one's
    dec, arrow = setup(columns, toast)
    if toast == "reselect" and columns[0][1] in (25, 1043):  # the fill index has a value for c0
        dec.loading = replace(dec.loading, fills=lambda commit_lsn, seq: {
            "c0": (columns[0][1], "filled")} if seq % 2 else {})
    txn = stored(payload)
    if backfill:
        txn = replace(txn, origin=f"{BACKFILL_ORIGIN}:b1")
    first = data.draw(st.integers(0, len(payload) - 1))
    budget = data.draw(st.integers(1, len(payload)))
    expected, got, _ = both(dec, arrow, txn, first_seq=first, max_changes=budget, ops=ops)
    assert got == expected


def _orders() -> list[Column]:
    return [("id", 20, True, -1), ("customer", 25, False, -1), ("amount", 1700, False, NUMERIC_12_3),
            ("status", 25, False, -1), ("note", 25, False, -1), ("created_at", 1184, False, -1)]


def test_plain_rows_are_compiled_and_special_values_go_to_the_reference() -> None:
    """Every kind the C code writes, in each layout, is compiled (no ``Change`` left); a change
    with a value it hands over (infinity, NaN numeric) is the reference's, alone, in place."""
    # money has a JSON/protobuf fast kind but is a string the reference formats in Arrow
    fast = [i for i, (_, o, _) in enumerate(ALL_FAST) if o != 790]
    columns = [(n, o, k, NUMERIC_12_3 if o == 1700 else -1)
               for n, o, k in (ALL_FAST[i] for i in fast)]
    ROW = [ALL_ROW[i] for i in fast]
    dec, arrow = setup(columns)
    rel = struct.pack(">I", RELID)
    new, key = tuple_data(list(ROW)), tuple_data([ROW[0]] + [None] * (len(ROW) - 1))
    special = list(ROW)
    special[columns.index(("tstz", 1184, False, -1))] = "infinity"
    plain = [b"I" + rel + b"N" + new, b"U" + rel + b"N" + new, b"U" + rel + b"K" + key + b"N" + new,
             b"U" + rel + b"O" + new + b"N" + new, b"D" + rel + b"K" + key, b"D" + rel + b"O" + new]
    expected, got, changes = both(dec, arrow, stored(plain))
    assert got == expected and [type(c) for c in changes] == [Segment]
    assert changes[0].rows == len(plain)
    mixed = plain[:2] + [b"I" + rel + b"N" + tuple_data(special)] + plain[2:]
    expected, got, changes = both(dec, arrow, stored(mixed))
    assert got == expected
    assert [type(c) for c in changes] == [Segment, Change, Segment]
    assert got[2]["tstz"] is None and got[2]["id"] == 9_000_000_000


def test_orders_values_nan_and_unchanged_toast() -> None:
    """bench/capture.py's ``orders``: numeric(12,2) NaN is null (Arrow's decimals have no NaN,
    as the reference writes it), unchanged TOAST is null and listed under ``toast=omit``."""
    dec, arrow = setup(_orders())
    rel = struct.pack(">I", RELID)
    row = ["7", "customer-7", "12.50", "new", None, "2026-01-01 00:00:07+00"]
    nan = ["8", "c", "NaN", "new", "x", "2026-01-01 00:00:08.5+00"]
    toast = ["7", "customer-7", "13.50", "paid", b"u", "2026-01-01 00:00:07+00"]
    payload = [b"I" + rel + b"N" + tuple_data(row), b"I" + rel + b"N" + tuple_data(nan),  # type: ignore[list-item]
               b"U" + rel + b"N" + tuple_data(toast), b"D" + rel + b"K" + tuple_data(["7"] + [None] * 5)]  # type: ignore[list-item]
    expected, got, changes = both(dec, arrow, stored(payload))
    assert got == expected and [type(c) for c in changes] == [Segment]
    assert got[1]["amount"] is None and got[2]["note"] is None
    assert got[2]["_unchanged_toast"] == ["note"] and got[3]["customer"] is None
    placeholder, _ = setup(_orders(), toast="placeholder")  # typed rows: null all the same
    expected, got, changes = both(placeholder, arrow, stored(payload))
    assert got == expected and [type(c) for c in changes] == [Segment]
    reselect, _ = setup(_orders(), toast="reselect")  # the fill index's value: the reference's
    reselect.loading = replace(reselect.loading, fills=lambda commit_lsn, seq: {"note": (25, "filled")})
    expected, got, changes = both(reselect, arrow, stored(payload))
    assert got == expected and [type(c) for c in changes] == [Segment, Change, Segment]
    assert got[2]["note"] == "filled" and got[2]["_unchanged_toast"] == ["note"]


def test_a_table_with_kinds_the_c_code_does_not_write_is_the_reference() -> None:
    columns = [("id", 20, True, -1), ("tags", 1009, False, -1), ("span", 1186, False, -1)]
    dec, arrow = setup(columns)
    rel = struct.pack(">I", RELID)
    payload = [b"I" + rel + b"N" + tuple_data(["1", "{a,b}", "1 day"])]
    expected, got, changes = both(dec, arrow, stored(payload))
    assert got == expected and [type(c) for c in changes] == [Change]
    columns = [("id", 20, True, -1), ("span", 1186, False, -1)]  # interval: Arrow string, not C
    dec, arrow = setup(columns)
    expected, got, changes = both(dec, arrow, stored([b"I" + rel + b"N" + tuple_data(["1", "1 day"])]))
    assert got == expected and [type(c) for c in changes] == [Change]


def test_no_compiled_module_means_no_sink(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_rows, "_compiled", None)
    _, arrow = setup(_orders())
    assert arrow_rows.sink_for(arrow, typed_schema(arrow)) is None


def test_frames_past_a_page_budget_resume_where_the_sink_stopped() -> None:
    """A transaction read over several pages (``first_seq``/``max_changes``) gives the same
    rows page by page as the reference, and the decoder's resume point is where C stopped."""
    dec, arrow = setup(_orders())
    rel = struct.pack(">I", RELID)
    payload = [b"I" + rel + b"N" + tuple_data([str(i), "c", "1.00", "new", None,
                                                "2026-01-01 00:00:00+00"]) for i in range(10)]
    txn = stored(payload)
    for first in range(0, 10, 3):
        expected, got, _ = both(dec, arrow, txn, first_seq=first, max_changes=3)
        assert got == expected and [r["id"] for r in got] == list(range(first, min(first + 3, 10)))


def test_one_dimensional_arrays_are_compiled() -> None:
    """Arrays of the kinds the C code writes, element by element (quoted, escaped, NULL and
    "NULL", NaN, infinities, zones, bytea); a multi-dimensional one is the reference's (null)."""
    columns = [("id", 20, True, -1), ("nums", 1007, False, -1), ("tags", 1009, False, -1),
               ("ps", 1231, False, ((5 << 16) | 2) + 4), ("ts", 1185, False, -1),
               ("raw", 1001, False, -1), ("fl", 1022, False, -1), ("b", 1000, False, -1)]
    dec, arrow = setup(columns)
    rel = struct.pack(">I", RELID)
    plain = [["1", "{1,2,NULL}", '{a,NULL,"c d","e\\"f","NULL",""}', "{1.50,NaN}",
              '{"2026-11-22 10:00:00+00"}', '{"\\\\x00ff"}', "{NaN,-Infinity,1.5}", "{t,f,NULL}"],
             ["2", "{}", "{}", None, '{"2026-11-22 10:00:00.5+00",NULL}', "{}", "{}", "{}"]]
    nested = ["3", "{{1,2},{3,4}}", "{x}", "{1}", None, None, None, None]
    payload = [b"I" + rel + b"N" + tuple_data(r) for r in [*plain, nested]]  # type: ignore[arg-type]
    expected, got, changes = both(dec, arrow, stored(payload))
    assert got == expected and [type(c) for c in changes] == [Segment, Change]
    assert got[0]["tags"] == ["a", None, "c d", 'e"f', "NULL", ""] and got[0]["raw"] == [b"\x00\xff"]
    assert got[0]["nums"] == [1, 2, None] and got[1]["nums"] == [] and got[2]["nums"] is None


def _insert(i: int, created_at: str = "2026-01-01 00:00:00+00") -> bytes:
    return b"I" + struct.pack(">I", RELID) + b"N" + tuple_data(
        [str(i), "c", "1.00", "new", None, created_at])


def _page(dec: TransactionDecoder, payloads: list[list[bytes]], *, load: bool = False,
          **kw: Any) -> list[Any]:
    """Transactions of ``payloads``, one after the other, decoded as one page is."""
    out = [dec.decode(replace(stored(p), commit_lsn=COMMIT + 0x100 * i, end_lsn=COMMIT + 0x100 * i + 8),
                      tables={"public.t"}, **kw) for i, p in enumerate(payloads)]
    return [loaded(t) for t in out] if load else out


def test_compiled_rows_run_on_across_transactions_up_to_a_batch_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A page of one-row transactions is not a batch a row (a Spark executor pays per batch):
    compiled rows run on into batches of up to BATCH_ROWS, a reference change (infinity) ends
    a run in place, and the rows are the reference's, in order."""
    dec, arrow = setup(_orders())
    schema = typed_schema(arrow)
    payloads = [[_insert(i)] for i in range(7)]
    payloads[4] = [_insert(4, "infinity")]
    payloads[5] = [_insert(50), _insert(51)]
    expected = rows([typed_batch(_page(dec, payloads, load=True), arrow, schema)], schema)
    sink = arrow_rows.sink_for(arrow, schema)
    assert sink is not None
    batches = sink.batches(_page(dec, payloads))
    assert [b.num_rows for b in batches] == [4, 1, 3]
    assert rows(batches, schema) == expected
    assert [r["id"] for r in expected] == [0, 1, 2, 3, 4, 50, 51, 6]
    monkeypatch.setattr(arrow_rows, "BATCH_ROWS", 3)
    sink = arrow_rows.sink_for(arrow, schema)
    assert sink is not None
    batches = sink.batches(_page(dec, payloads))
    assert [b.num_rows for b in batches] == [3, 1, 1, 3]
    assert rows(batches, schema) == expected


def test_a_pages_buffers_are_handed_to_arrow_without_a_copy() -> None:
    """The compiled columns' memory becomes the batch's buffers as it is (a page is tens of
    megabytes) and outlives the sink that wrote it; it is taken once, after the last scan."""
    dec, arrow = setup(_orders())
    schema = typed_schema(arrow)
    payloads = [[_insert(i)] for i in range(5)]
    expected = rows([typed_batch(_page(dec, payloads, load=True), arrow, schema)], schema)
    sink = arrow_rows.sink_for(arrow, schema)
    assert sink is not None
    written = sink.write(_page(dec, payloads))
    compiled, taken = sink.rows, []

    def buffers() -> Any:  # recording what the compiled rows hand over
        taken.extend(compiled.buffers())
        return taken

    sink.rows = SimpleNamespace(rows=compiled.rows, buffers=buffers)  # type: ignore[assignment]
    batches = sink.assemble(written)
    owned = [b for item in taken for b in (item if isinstance(item, tuple) else (item,))
             if type(b).__name__ == "Owned"]
    assert len(owned) >= len(arrow)  # every column's values at least
    in_batch = {buf.address for b in batches for col in b.columns
                for buf in col.buffers() if buf is not None}
    assert {pa.py_buffer(b).address for b in owned} <= in_batch
    with pytest.raises(ValueError, match="taken already"):
        compiled.buffers()
    with pytest.raises(ValueError, match="after buffers"):
        compiled.scan(b"", 0, 0, 0, 0, b"\0" * len(arrow), 0, 0, 0, 0, 1)
    del sink, written
    taken.clear()  # the batches alone hold the memory now
    owned.clear()
    assert rows(batches, schema) == expected


# float8 texts: Python's float() reads each the same as the C code (strtod_l, C locale)
_FLOATS_COMPILED = ["1.5", "-0", "0", "-0.0", "0.1", "5.", ".5", "+1", "1e308", "1e309", "-1e309",
                    "1E-5", "1e+5", "4.9e-324", "2.4703282292062328e-324", "1e-400",
                    "1.7976931348623157e308", "1.7976931348623159e308",
                    "123456789012345678901234567890", "NaN", "-NaN", "nan", "Infinity",
                    "-Infinity", "inf", "+INF", "-infinity"]
# ...and texts it leaves to the reference (float() may still read some: spaces, underscores)
_FLOATS_REFERENCE = ["1e", "1e+", "e5", ".", "-", "1.2.3", " 1", "1 ", "0x10", "1_0", "\u0661",
                     "infinit", "nan(1)", "1" * 70]
# text bytes: well-formed UTF-8 is compiled, anything Python's strict decoder refuses is not
_UTF8 = [b"plain", "\u00e9t\u00e9".encode(), "\u20ac".encode(), "\U0001d11e".encode(),
         "\ud7ff\ue000\U0010ffff".encode(), b"\xc0\x80", b"\xc1\xbf", b"\xed\xa0\x80",
         b"\xed\xbf\xbf", b"\xe0\x9f\xbf", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80",
         b"\xe2\x82", b"\x80", b"a\xffb", b"\xe2\x82\xac\xe2"]


def _decodes(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("text", _FLOATS_COMPILED + _FLOATS_REFERENCE)
def test_float_texts_are_read_as_python_reads_them(text: str) -> None:
    """The C float parser takes exactly PyOS_string_to_double's forms, with its values bit for
    bit (rounding, overflow to infinity, underflow, NaN's sign); any other text is the
    reference's, in place."""
    dec, arrow = setup([("id", 20, True, -1), ("x", 701, False, -1)])
    rel = struct.pack(">I", RELID)
    expected, got, changes = both(dec, arrow, stored([b"I" + rel + b"N" + tuple_data(["1", text])]))
    assert got == expected
    assert [type(c) for c in changes] == ([Segment] if text in _FLOATS_COMPILED else [Change])
    if text in _FLOATS_COMPILED:
        assert got[0]["x"] == _exact(float(text))


@pytest.mark.parametrize("raw", _UTF8)
def test_text_bytes_are_compiled_exactly_when_they_are_well_formed_utf8(raw: bytes) -> None:
    """The C validator takes what Python's strict UTF-8 decoder takes; anything else goes to the
    reference, whose wire decoder refuses it (a text column's bytes are never passed on)."""
    dec, arrow = setup([("id", 20, True, -1), ("s", 25, False, -1)])
    rel = struct.pack(">I", RELID)
    new = struct.pack(">HcIcci", 2, b"t", 1, b"1", b"t", len(raw)) + raw  # 't' texts, raw bytes
    txn = stored([b"I" + rel + b"N" + new])
    if not _decodes(raw):
        sink = arrow_rows.sink_for(arrow, typed_schema(arrow))
        with pytest.raises(DecodeError, match="UTF-8"):
            sink.batches([dec.decode(txn, tables={"public.t"})])
        return
    expected, got, changes = both(dec, arrow, txn)
    assert got == expected and [type(c) for c in changes] == [Segment]
    assert got[0]["s"] == raw.decode()


def test_a_scan_lets_other_threads_run() -> None:
    """The C scan of a page's frames runs without the GIL, so a server answering several readers
    scans their pages on several cores: another Python thread keeps running all through one
    scan of many rows (holding the GIL, the scan would stop it for its whole length)."""
    dec, arrow = setup(_orders())
    schema = typed_schema(arrow)
    payload = stored([_insert(i) for i in range(100_000)])
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())

    sink = arrow_rows.sink_for(arrow, schema)
    assert sink is not None
    thread = threading.Thread(target=tick)
    thread.start()
    try:
        while not ticks:
            time.sleep(0.001)
        t0 = time.perf_counter()
        written = sink.write([dec.decode(payload, tables={"public.t"})])
        t1 = time.perf_counter()
    finally:
        stop.set()
        thread.join()
    assert [items for _t, items in written] == [[100_000]]
    inside = [t0, *(t for t in ticks if t0 < t < t1), t1]
    longest = max(b - a for a, b in itertools.pairwise(inside))
    assert t1 - t0 > 0.01 and longest < (t1 - t0) / 2, (t1 - t0, longest)


def test_a_wide_numeric_after_a_nan_keeps_its_value() -> None:
    """A NaN sends the column down the per-value path, whose quantize once used the default
    28-digit context: 10^25 in a numeric(38,3) key became null there and not in C."""
    columns: list[Column] = [("c0", 1700, True, NUMERIC_38_3), ("c1", 16, False, -1)]
    wide = "1" + "0" * 25 + ".000"
    payload = [b"I" + struct.pack(">I", RELID) + b"N" + tuple_data(["NaN", None]),
               b"D" + struct.pack(">I", RELID) + b"K" + tuple_data([wide, None])]
    dec, arrow = setup(columns)
    expected, got, _ = both(dec, arrow, stored(payload), first_seq=0, max_changes=2)
    assert [r["c0"] for r in expected] == [r["c0"] for r in got] == [None, Decimal(wide)]
