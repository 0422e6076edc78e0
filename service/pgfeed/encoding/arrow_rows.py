"""Typed Arrow rows of one table compiled straight from the stored pgoutput frames.

The reference typed read (``to_arrow.typed_batch``) loads every value into a Python object
(psycopg's loaders) and builds each column from a list: ~8 µs of server CPU a change. Here the
sink hands the runs of row frames a decoded page holds (``decoding.runs.RowRun``) to
``_transcode.ArrowRows`` (compiled, in ``_transcode_arrow.c``), one call a run, which walks the frames and TupleData in C and appends each column's text
to Arrow buffers (validity bitmaps, int/float/bool/date32/timestamp[us]/decimal128 values,
offsets + data for strings and binaries); the page's batch is then ``pa.Array.from_buffers``.

Same values as the reference, by construction of the rules (``_transcode_arrow.c``) and by test
(tests/unit/encoding/test_arrow_rows.py, tests/integration/test_spark.py). Anything outside them
takes the reference path: a whole relation version when a column's kind is not one the C code
converts to that column's Arrow type (arrays, uuid, an older shape of the table, ...), one
change when a value or layout is (infinity, BC, a year past 9999, NaN in a float-less place,
unchanged TOAST under ``toast=reselect``, binary columns, ...). Those changes are loaded from
their run (``RowRun.load_at``); ``batches`` interleaves their reference rows with the compiled
ones in change order.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from pgfeed.decoding.model import Change, Transaction
from pgfeed.decoding.plan import RelationPlan
from pgfeed.decoding.runs import Read, RowRun
from pgfeed.encoding import transcode
from pgfeed.encoding.arrow_abi import (
    DIGEST,
    META_COLUMNS,
    ArrowKind,
    ColumnBuffer,
    ColumnSpec,
    ScanFlag,
    Slot,
)
from pgfeed.encoding.to_arrow import KEY_FIELD, ArrowColumn, typed_batch
from pgfeed.pgoutput.messages import PG_EPOCH_UNIX_US
from pgfeed.types.array import ELEMENT_OID
from pgfeed.types.registry import fast_kind, loader_oid
from pgfeed_client.pgtypes import TEXT_ARRAY_OID

if TYPE_CHECKING:
    from pgfeed.encoding._transcode import Buffer

__all__ = ["BATCH_ROWS", "ArrowSink", "sink_for"]

# Rows a compiled batch holds at most. A Spark executor pays per batch (an IPC message, vectors
# to set up), so a page of one-row transactions must not be one batch a row; and it pays for
# size past its caches: on the orders read (bench/spark.py --real) batches of 5,000 and 10,000
# rows read at the same rate, 20,000 or a whole 100,000-row page 10-15% slower.
BATCH_ROWS = 10_000

_compiled = transcode._compiled  # None: no compiled module (or PGFEED_IMPL=python)

# the compiled rows speak arrow_abi (its _arrow_abi.h); a build of another one is left out
if _compiled is not None and getattr(_compiled, "ARROW_ABI", None) != DIGEST:  # a stale build
    _compiled = None

_FIXED = {pa.int16(): ArrowKind.INT16, pa.int32(): ArrowKind.INT32, pa.int64(): ArrowKind.INT64,
          pa.float32(): ArrowKind.FLOAT32, pa.float64(): ArrowKind.FLOAT64,
          pa.bool_(): ArrowKind.BOOL, pa.date32(): ArrowKind.DATE32,
          pa.string(): ArrowKind.STRING, pa.binary(): ArrowKind.BINARY}

# the registry's fast kind (FAST_KINDS) -> the Arrow types the C code writes it as (anything
# else, "money" included: the reference)
_WRITES: dict[str, frozenset[Any]] = {
    "int": frozenset({pa.int16(), pa.int32(), pa.int64()}),
    "float": frozenset({pa.float32(), pa.float64()}),
    "numeric": frozenset({"decimal", pa.string()}),
    "bool": frozenset({pa.bool_()}), "bytea": frozenset({pa.binary()}),
    "date": frozenset({pa.date32()}), "timestamp": frozenset({pa.timestamp("us")}),
    "timestamptz": frozenset({pa.timestamp("us", tz="UTC")}),
    "text": frozenset({pa.string()}), "json": frozenset({pa.string()}),
    "time": frozenset({pa.string()}),
}

_ALL_OPS = int(ScanFlag.WANT_INSERT | ScanFlag.WANT_UPDATE | ScanFlag.WANT_DELETE
               | ScanFlag.WANT_READ)  # ArrowRows.scan: every op (a page's filter comes after)


def _spec(t: pa.DataType) -> ColumnSpec | None:
    """How ArrowRows writes a column of type ``t``; None if not one C writes."""
    if pa.types.is_list(t):
        element = _spec(t.value_type)
        if element is None or element.kind == ArrowKind.LIST:
            return None
        return ColumnSpec(ArrowKind.LIST, element.precision, element.scale, element.kind)
    if pa.types.is_decimal128(t):
        return ColumnSpec(ArrowKind.DECIMAL, t.precision, t.scale, 0)
    if pa.types.is_timestamp(t):
        return ColumnSpec(ArrowKind.TIMESTAMP, 0, 0, 0) \
            if t.unit == "us" and t.tz in (None, "UTC") else None
    code = _FIXED.get(t)
    return None if code is None else ColumnSpec(code, 0, 0, 0)


def _column_kind(value_oid: int) -> tuple[str, bool] | None:
    """The registry's fast kind of a column's values (of its elements for an array the
    reference splits), and whether it is an array; None for what the C code does not read."""
    kind = fast_kind(value_oid)
    if kind is not None:
        return kind, False
    loader = loader_oid(value_oid)
    if loader == TEXT_ARRAY_OID:
        return "text", True
    element = ELEMENT_OID.get(loader)
    kind = None if element is None else fast_kind(element)
    return None if kind is None or kind == "json" else (kind, True)


# relation version -> {sink's shape: its kinds for ArrowRows.scan, or None}
_KINDS: weakref.WeakKeyDictionary[RelationPlan, dict[Any, bytes | None]] = weakref.WeakKeyDictionary()


class ArrowSink:
    """The compiled rows of one page of a typed read of one table (its newest shape,
    ``columns``)."""

    def __init__(self, columns: Sequence[ArrowColumn], schema: pa.Schema,
                 specs: list[ColumnSpec]) -> None:
        assert _compiled is not None
        self.columns = tuple(columns)
        self.schema = schema
        self.types = [schema.field(c.name).type for c in columns]
        self.key_names = tuple(c.name for c in columns if c.key)
        keys = tuple(i for i, c in enumerate(columns) if c.key)
        self.rows = _compiled.ArrowRows(tuple(specs), keys,
                                        tuple(c.name.encode() for c in columns))
        self._cache_key = ("arrow", tuple(zip((c.name for c in columns), map(str, self.types))),
                           self.key_names)

    def kinds(self, plan: RelationPlan) -> bytes | None:
        """``plan``'s column kinds for ``ArrowRows.scan``; None when its rows are the
        reference's (cached on the relation version)."""
        cached = _KINDS.get(plan)
        if cached is None:
            cached = _KINDS[plan] = {}
        if self._cache_key not in cached:
            cached[self._cache_key] = self._kinds(plan)
        return cached[self._cache_key]

    def _kinds(self, plan: RelationPlan) -> bytes | None:
        names = tuple(c.name for c in self.columns)
        if plan.column_names != names or tuple(plan.key_names) != self.key_names:
            return None
        kinds = []
        for oid, t in zip(plan.value_oids, self.types):
            found = _column_kind(oid)
            if found is None or found[1] != pa.types.is_list(t):
                return None
            kind, is_list = found
            value_type = t.value_type if is_list else t
            written = _WRITES.get(kind, frozenset())
            if value_type not in written and not (pa.types.is_decimal128(value_type)
                                                  and "decimal" in written):
                return None
            kinds.append(kind)
        return bytes(transcode._KIND_CODES[k] for k in kinds)

    def _scan(self, run: RowRun, txn: Transaction[Read], out: list[int | Change]) -> None:
        """Append ``run``'s rows: compiled ones to the column buffers (counted in ``out`` as an
        int), the ones the compiled rules refuse as loaded Changes."""
        kinds = self.kinds(run.plan)
        if kinds is None:
            out.extend(run.load())
            return
        flags = int(_ALL_OPS | (ScanFlag.READ if run.read else 0) | (
            ScanFlag.ALLOW_U if run.loading.toast != "reselect" else 0))  # reselect: the fill's
        payload, pos, seq, stop = run.payload, run.start, run.first_seq - 1, run.last_seq + 1
        relation_id, version = run.plan.schema.relation_id, run.plan.schema.version
        commit_ts = txn.commit_ts + PG_EPOCH_UNIX_US
        while True:
            pos, seq, rows = self.rows.scan(payload, pos, seq, stop, relation_id, kinds,
                                            txn.commit_lsn, commit_ts, txn.xid, flags, version)
            if rows:
                if out and type(out[-1]) is int:
                    out[-1] += rows
                else:
                    out.append(rows)
            if seq + 1 >= stop:
                return
            seq += 1
            change, pos = run.load_at(pos, seq)  # refused by the compiled rules: the reference's
            out.append(change)

    def _batch(self) -> pa.RecordBatch:
        bufs = self.rows.buffers()
        n = self.rows.rows
        width = len(self.columns)
        elements = iter(bufs[width + len(self.key_names) + len(Slot):])
        arrays = [_list(t, n, b, next(elements)) if pa.types.is_list(t) else _array(t, n, b)
                  for t, b in zip(self.types, bufs)]
        keys = bufs[width:width + len(self.key_names)]
        meta = bufs[width + len(self.key_names):]
        for f in list(self.schema)[width:width + len(META_COLUMNS)]:  # in the schema's order
            slot = META_COLUMNS[f.name]
            if slot != Slot.TOAST_NAME:
                arrays.append(_array(f.type, n, meta[slot]))
                continue
            names = meta[Slot.TOAST_NAME]
            offsets = names[ColumnBuffer.VALUES]
            child = pa.Array.from_buffers(
                pa.string(), memoryview(offsets).nbytes // 4 - 1,
                [_buf(names[ColumnBuffer.VALID]), _buf(offsets), _buf(names[ColumnBuffer.DATA])],
                names[ColumnBuffer.NULLS])
            arrays.append(pa.Array.from_buffers(f.type, n, [None, _buf(meta[Slot.TOAST_OFFSETS])],
                                                children=[child]))
        if KEY_FIELD in self.schema.names:
            key_type = self.schema.field(KEY_FIELD).type
            children = [_array(key_type.field(i).type, n, b) for i, b in enumerate(keys)]
            valid = meta[Slot.KEY_VALID]
            arrays.append(pa.Array.from_buffers(key_type, n, [_buf(valid[ColumnBuffer.VALID])],
                                                valid[ColumnBuffer.NULLS], children=children))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def write(self, transactions: Sequence[Transaction[Read]],
              ) -> list[tuple[Transaction[Read], list[int | Change]]]:
        """Scan the page's runs: per transaction, in change order, the counts of rows written
        to the compiled columns (ints) and the changes the compiled rules refuse, loaded."""
        written: list[tuple[Transaction[Read], list[int | Change]]] = []
        for t in transactions:
            items: list[int | Change] = []
            for c in t.changes:
                if type(c) is RowRun:
                    self._scan(c, t, items)
                else:
                    items.append(c)
            written.append((t, items))
        return written

    def batches(self, transactions: Sequence[Transaction[Read]]) -> list[pa.RecordBatch]:
        """The page's rows in change order: the compiled rows, sliced into batches of up to
        ``BATCH_ROWS`` that run on across transactions until a reference row, and the
        reference's rows for the changes the compiled rules refuse. Once a sink."""
        return self.assemble(self.write(transactions))

    def assemble(self, written: list[tuple[Transaction[Read], list[int | Change]]],
                 ) -> list[pa.RecordBatch]:
        """The batches of what ``write`` wrote (the compiled columns taken, once)."""
        compiled = self._batch() if self.rows.rows else None
        out: list[pa.RecordBatch] = []
        pending: list[Transaction[Change]] = []
        start = end = 0  # compiled rows [start, end) not yet sliced into ``out``

        def flush() -> None:
            nonlocal start
            assert compiled is not None
            for lo in range(start, end, BATCH_ROWS):
                out.append(compiled.slice(lo, min(BATCH_ROWS, end - lo)))
            start = end

        for t, items in written:
            ref: list[Change] = []
            for item in items:
                if type(item) is int:
                    if ref:
                        pending.append(t.with_changes(ref))
                        ref = []
                    if pending:
                        out.append(typed_batch(pending, self.columns, self.schema))
                        pending = []
                    end += item
                else:
                    if end > start:
                        flush()
                    ref.append(item)  # type: ignore[arg-type]
            if ref:
                pending.append(t.with_changes(ref))
        if end > start:
            flush()
        if pending:
            out.append(typed_batch(pending, self.columns, self.schema))
        return out


def _buf(b: Buffer | None) -> pa.Buffer | None:
    return None if b is None else pa.py_buffer(b)


def _list(t: pa.ListType, n: int, b: tuple[Any, ...], elements: tuple[Any, ...]) -> pa.Array:
    offsets = b[ColumnBuffer.VALUES]
    count = int.from_bytes(memoryview(offsets)[-4:], "little", signed=True)  # the last list's end
    child = _array(t.value_type, count, elements)
    return pa.Array.from_buffers(t, n, [_buf(b[ColumnBuffer.VALID]), _buf(offsets)],
                                 b[ColumnBuffer.NULLS], children=[child])


def _array(t: pa.DataType, n: int, b: tuple[Any, ...]) -> pa.Array:
    data = b[ColumnBuffer.DATA]
    buffers = [_buf(b[ColumnBuffer.VALID]), _buf(b[ColumnBuffer.VALUES])] + (
        [_buf(data)] if data is not None else [])
    return pa.Array.from_buffers(t, n, buffers, b[ColumnBuffer.NULLS])


def sink_for(columns: Sequence[ArrowColumn], schema: pa.Schema) -> ArrowSink | None:
    """A sink for a typed read of a table of ``columns`` (``schema``: its typed schema), or None
    when the compiled module is missing or a column's Arrow type is not one it writes."""
    if _compiled is None or not columns:
        return None
    specs = [_spec(schema.field(c.name).type) for c in columns]
    if any(s is None or (s.kind == ArrowKind.LIST and c.key) for s, c in zip(specs, columns)):
        return None
    return ArrowSink(columns, schema, specs)  # type: ignore[arg-type]
