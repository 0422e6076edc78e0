"""Transaction/Change -> pgfeed.v1 protobuf bytes: typed Values, map rows, and frame splitting.

Writes the protobuf wire format directly (the generated classes parse it; a unit test checks
every value type against them): building messages field by field through the protobuf runtime
costs ~5 µs a change, which would halve the gRPC stream. Per-type encoders are picked by the
value's exact type (one dict lookup, no isinstance chains); map-entry heads are precomputed per
column; json/jsonb columns are told apart by the relation version a run of rows carries
(``RelationPlan.json_kinds``), since a json value may load as any Python type.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from pgfeed.codegen import define
from pgfeed.decoding.model import Change, Op, Transaction
from pgfeed.decoding.runs import Read, RowRun
from pgfeed.encoding.to_json import dumps as json_dumps
from pgfeed.encoding.transcode import run_bodies
from pgfeed.pgoutput.messages import PG_EPOCH_UNIX
from pgfeed.prototags import (
    CHANGE_AFTER,
    CHANGE_BEFORE,
    CHANGE_CONTENT,
    CHANGE_DDL,
    CHANGE_KEY,
    CHANGE_LSN,
    CHANGE_OP,
    CHANGE_OPTIONS,
    CHANGE_OPTIONS_ENTRY_KEY,
    CHANGE_OPTIONS_ENTRY_VALUE,
    CHANGE_PREFIX,
    CHANGE_SCHEMA,
    CHANGE_SEQ,
    CHANGE_TABLE,
    CHANGE_TABLES,
    CHANGE_TOAST_FILLED,
    CHANGE_TRANSACTIONAL,
    CHANGE_UNCHANGED_TOAST,
    DDL_COLUMN_ADDED,
    DDL_COLUMN_ATTNUM,
    DDL_COLUMN_DEFAULT,
    DDL_COLUMN_GENERATED,
    DDL_COLUMN_IDENTITY,
    DDL_COLUMN_MISSING_VALUE,
    DDL_COLUMN_NAME,
    DDL_COLUMN_NOT_NULL,
    DDL_COLUMN_PREVIOUS_NAME,
    DDL_COLUMN_TYPE,
    DDL_COLUMN_TYPE_OID,
    DDL_COLUMNS,
    DDL_COMMAND,
    DDL_NEW_NAME,
    DDL_OBJECT,
    DDL_OBJECT_TYPE,
    DDL_OLD_NAME,
    DDL_TABLE,
    OP_DDL,
    OP_DELETE,
    OP_INSERT,
    OP_MESSAGE,
    OP_READ,
    OP_TRUNCATE,
    OP_UPDATE,
    TRANSACTION_BACKFILL,
    TRANSACTION_CHANGES,
    TRANSACTION_COMMIT_LSN,
    TRANSACTION_COMMIT_TS,
    TRANSACTION_CURSOR,
    TRANSACTION_END_LSN,
    TRANSACTION_FINAL,
    TRANSACTION_ORIGIN,
    TRANSACTION_XID,
    VALUE_LIST_VALUES,
)
from pgfeed.protowire import HEADS as _HEADS
from pgfeed.protowire import SMALL as _SMALL
from pgfeed.protowire import VALUE, ld_field, table_version_field, text_field, varint
from pgfeed.protowire import VC as _VC
from pgfeed.protowire import MapColumn as _Column
from pgfeed.protowire import V as _V
from pgfeed.protowire import map_column as _column
from pgfeed.protowire import timestamp_field as _timestamp
from pgfeed.types.interval import Interval
from pgfeed.types.json import JsonText, proto_json
from pgfeed.types.registry import proto_writers
from pgfeed_client._cursor import Cursor, format_lsn

__all__ = [
    "FRAME_BYTES",
    "FRAME_CHANGES",
    "Framer",
    "change_bytes",
    "transaction_frames",
    "value_bytes",
]

# Frames stay far below gRPC's default 4 MiB receive limit; a frame only exceeds FRAME_BYTES when
# a single change does (it is then sent alone).
FRAME_BYTES = 1 << 20
FRAME_CHANGES = 10_000

# -- Value: the type registry's writers (service/pgfeed/types), lists and null here --------------------------

_NULL = VALUE["null_value"] + b"\x00"
_TRUE, _FALSE = VALUE["bool_value"] + b"\x01", VALUE["bool_value"] + b"\x00"
_INT, _STRING, _LIST = VALUE["int_value"], VALUE["string_value"], VALUE["list_value"]


def _v_none(v: None) -> bytes:
    return _NULL


def _v_json(v: Any) -> bytes:
    return proto_json(v, json_dumps)


def _v_list(v: list[Any]) -> bytes:
    parts = []
    for item in v:
        e = _VALUE.get(type(item), _v_other)(item)
        n = len(e)
        parts.append(VALUE_LIST_VALUES + (_V[n] if n < _SMALL else varint(n)) + e)
    body = b"".join(parts)
    n = len(body)
    return _LIST + (_V[n] if n < _SMALL else varint(n)) + body


def _v_json_list(v: Any) -> bytes:
    """A json[]/jsonb[] column: a list of json values (each element one json_value; an element
    holding the document ``null`` is null_value, as the JSON event's ``null``: an array's
    elements have no ``json_null`` list to tell them apart)."""
    if type(v) is not list:
        return value_bytes(v)
    parts = []
    for item in v:
        e = _NULL if type(item) is JsonText and item.text == "null" else _v_json(item)
        n = len(e)
        parts.append(VALUE_LIST_VALUES + (_V[n] if n < _SMALL else varint(n)) + e)
    body = b"".join(parts)
    return _LIST + varint(len(body)) + body


def _v_other(v: Any) -> bytes:
    """Anything else (a type the loaders do not produce today): its text form."""
    return text_field(_STRING, str(v))


_VALUE: dict[type, Callable[[Any], bytes]] = {
    **proto_writers(), type(None): _v_none, dict: _v_json, JsonText: _v_json, list: _v_list}
_BY_KIND: dict[str, Callable[[Any], bytes]] = {"json": _v_json, "json[]": _v_json_list}


def value_bytes(v: Any, kind: str | None = None) -> bytes:
    """One column value -> the serialized ``pgfeed.v1.Value`` (see feed.proto for the mapping).

    ``kind`` "json" or "json[]" marks a json/jsonb column (or an array of them), whose values
    are JSON whatever Python type they loaded as."""
    if kind is not None:
        return _BY_KIND[kind](v)
    return _VALUE.get(type(v), _v_other)(v)


# -- rows: map<string, Value> ------------------------------------------------------------------------

_TEXT_HEADS = _HEADS - 2


def _row(tag: bytes, row: dict[str, Any], out: list[bytes],
         kinds: Mapping[str, str] | None) -> None:
    """Append the map entries of ``row`` (field ``tag``) to ``out``: the reference path, for any
    row; ``_RowEncoder`` is the fast path for rows shaped like the ones before."""
    for name, v in row.items():
        col = _column(tag, name)
        if kinds is not None and name in kinds:
            out.append(col.entry(_BY_KIND[kinds[name]](v)))
        else:
            out.append(col.entry(_VALUE.get(type(v), _v_other)(v)))


_SMALL_INTS = [_INT + _V[n] for n in range(_SMALL)]
# Value encoders the generated code calls directly for a speculated type.
_SPECULATED: dict[type, Callable[[Any], bytes]] = {
    t: _VALUE[t] for t in (int, float, Decimal, datetime, date, time, bytes, Interval, dict)}
_TEXT_CACHE = 512  # whole entries of the first distinct short texts of a column (status, names)


class _RowEncoder:
    """Generated code for rows of one shape (column names in order, each column's value type as
    first seen): one function that looks every column up, encodes it with the code for its
    speculated type and extends ``out`` once. Short texts are cached as whole entries per column
    (low-cardinality columns are common). A value of another type takes the column's generic
    path; a row of another shape raises KeyError and the caller builds a new encoder."""

    __slots__ = ("encode", "kinds", "names")

    def __init__(self, tag: bytes, row: dict[str, Any], kinds: Mapping[str, str] | None) -> None:
        self.names = tuple(row)
        self.kinds = kinds
        env: dict[str, Any] = {"SI": _SMALL_INTS, "KE": KeyError}
        lines = ["def encode(row, out):", f"    if len(row) != {len(self.names)}:", "        raise KE"]
        for i, (name, value) in enumerate(row.items()):
            col = _column(tag, name)
            kind = kinds.get(name) if kinds is not None else None
            env.update({f"K{i}": name, f"G{i}": _generic(col, kind), f"H{i}": col.head})
            t = type(value)
            lines.append(f"    v = row[K{i}]")
            if kind is not None or (t not in _SPECULATED and t is not str and t is not bool):
                lines.append(f"    e{i} = G{i}(v)")
            elif t is str:
                env[f"C{i}"], env[f"TH{i}"] = {}, col.text_head
                # the type test first: a column seen as text may hold a list (a refused array
                # element keeps text), and a list is no dict key
                lines += ["    if v.__class__ is str:",
                          f"        e{i} = C{i}.get(v)",
                          f"        if e{i} is None:",
                          "            b = v.encode()",
                          f"            if len(b) < {_TEXT_HEADS}:",
                          f"                e{i} = TH{i}[len(b)] + b",
                          f"                if len(C{i}) < {_TEXT_CACHE}:",
                          f"                    C{i}[v] = e{i}",
                          "            else:",
                          f"                e{i} = G{i}(v)",
                          "    else:",
                          f"        e{i} = G{i}(v)"]
            elif t is bool:
                env[f"T{i}"], env[f"F{i}"] = col.head[2] + _TRUE, col.head[2] + _FALSE
                lines.append(f"    e{i} = T{i} if v is True else F{i} if v is False else G{i}(v)")
            elif t is int:
                env["VC"], env["VV"], env["I"] = _VC, _V, _INT
                lines += [f"    if v.__class__ is int and -1 < v < {1 << 28}:",
                          f"        b = SI[v] if v < {_SMALL} else I + VC[v & 0x3FFF] + VV[v >> 14]",
                          f"        e{i} = H{i}[len(b)] + b",
                          "    else:",
                          f"        e{i} = G{i}(v)"]
            else:
                env[f"T{i}"], env[f"E{i}"] = t, _SPECULATED[t]
                lines += [f"    if v.__class__ is T{i}:",
                          f"        b = E{i}(v)",
                          f"        e{i} = H{i}[len(b)] + b if len(b) < {_HEADS} else G{i}(v)",
                          "    else:",
                          f"        e{i} = G{i}(v)"]
        lines.append(f"    out += ({''.join(f'e{i}, ' for i in range(len(self.names)))})")
        self.encode: Callable[[dict[str, Any], list[bytes]], None] = define(
            "encode", lines, env, f"{len(self.names)} columns: {', '.join(self.names)}"[:200])


def _generic(col: _Column, kind: str | None) -> Callable[[Any], bytes]:
    """A column's path for any value: the whole map entry."""
    encode = _BY_KIND[kind] if kind is not None else None
    entry = col.entry

    def generic(v: Any) -> bytes:
        return entry(encode(v) if encode is not None else _VALUE.get(type(v), _v_other)(v))

    return generic


_ENCODERS: dict[tuple[bytes, str | None, str | None, int], _RowEncoder] = {}


def _encode_row(tag: bytes, schema: str | None, table: str | None, row: dict[str, Any],
                out: list[bytes], kinds: Mapping[str, str] | None) -> None:
    key = (tag, schema, table, len(row))
    enc = _ENCODERS.get(key)
    if enc is None or (enc.kinds is not kinds and enc.kinds != kinds):
        if len(_ENCODERS) > 10_000:
            _ENCODERS.clear()
        enc = _ENCODERS[key] = _RowEncoder(tag, row, kinds)
    try:
        enc.encode(row, out)
    except KeyError:  # same table and width, other columns (a schema change): a new encoder
        _ENCODERS[key] = enc = _RowEncoder(tag, row, kinds)
        enc.encode(row, out)


# -- Change ------------------------------------------------------------------------------------------

_OP = {op: CHANGE_OP + _V[number] for op, number in (
    (Op.INSERT, OP_INSERT), (Op.UPDATE, OP_UPDATE), (Op.DELETE, OP_DELETE),
    (Op.TRUNCATE, OP_TRUNCATE), (Op.MESSAGE, OP_MESSAGE), (Op.READ, OP_READ), (Op.DDL, OP_DDL))}
_KEY, _BEFORE, _AFTER = CHANGE_KEY, CHANGE_BEFORE, CHANGE_AFTER
_TRUE_FLAG = b"\x01"  # a bool field's true (false is left out)


def _strings(field: bytes, names: Iterable[str]) -> bytes:
    return b"".join(text_field(field, n) for n in names)


_CHANGE_HEADS: dict[tuple[Op, str | None, str | None], bytes] = {}


def _change_head(op: Op, schema: str | None, table: str | None) -> bytes:
    """op, schema and table fields (3-5): the same bytes for every change of a table and op."""
    head = _OP[op] + (text_field(CHANGE_SCHEMA, schema) if schema else b"") + (
        text_field(CHANGE_TABLE, table) if table else b"")
    if len(_CHANGE_HEADS) > 10_000:
        _CHANGE_HEADS.clear()
    _CHANGE_HEADS[(op, schema, table)] = head
    return head


def _lsn_field(lsn: int) -> bytes:
    """Field 1 (lsn)."""
    if (1 << 28) <= lsn < (1 << 42):  # from 0/10000000 to 3FF/FFFFFFFF: 5 or 6 bytes
        return CHANGE_LSN + _VC[lsn & 0x3FFF] + _VC[lsn >> 14 & 0x3FFF] + _V[lsn >> 28]
    return CHANGE_LSN + varint(lsn) if lsn else b""


def _change_parts(change: Change, kinds: Mapping[str, str] | None, out: list[bytes]) -> None:
    """Append the serialized fields of one Change to ``out`` (field order is free in protobuf)."""
    op, schema, table, seq = change.op, change.schema, change.table, change.seq
    out.append(_CHANGE_HEADS.get((op, schema, table)) or _change_head(op, schema, table))
    if change.table_version:
        out.append(table_version_field(change.table_version))
    out.append(_lsn_field(change.lsn))
    if seq:
        out.append(CHANGE_SEQ + (_V[seq] if seq < _SMALL else varint(seq)))
    row = change.key
    if row:
        _encode_row(_KEY, schema, table, row, out, kinds)
    row = change.before
    if row:
        _encode_row(_BEFORE, schema, table, row, out, kinds)
    row = change.after
    if row:
        _encode_row(_AFTER, schema, table, row, out, kinds)
    if change.unchanged_toast:
        out.append(_strings(CHANGE_UNCHANGED_TOAST, change.unchanged_toast))
    if op is Op.MESSAGE:
        if change.prefix:
            out.append(text_field(CHANGE_PREFIX, change.prefix))
        if change.content:
            out.append(ld_field(CHANGE_CONTENT, bytes(change.content)))
        if change.transactional:
            out.append(CHANGE_TRANSACTIONAL + _TRUE_FLAG)
    elif op is Op.TRUNCATE:
        out.append(_strings(CHANGE_TABLES, change.tables or ()))
        for name, flag in (change.options or {}).items():
            key = name.encode()
            entry = CHANGE_OPTIONS_ENTRY_KEY + _V[len(key)] + key + (
                CHANGE_OPTIONS_ENTRY_VALUE + _TRUE_FLAG if flag else b"")
            out.append(CHANGE_OPTIONS + _V[len(entry)] + entry)
    elif op is Op.DDL and change.ddl is not None:
        out.append(ld_field(CHANGE_DDL, ddl_bytes(change.ddl)))
    if change.toast_filled:
        out.append(_strings(CHANGE_TOAST_FILLED, change.toast_filled))


_DDL_TEXT = ((DDL_COMMAND, "command"), (DDL_OBJECT_TYPE, "object_type"), (DDL_OBJECT, "object"),
             (DDL_TABLE, "table"), (DDL_OLD_NAME, "old_name"), (DDL_NEW_NAME, "new_name"))
_COLUMN_TEXT = ((DDL_COLUMN_NAME, "name"), (DDL_COLUMN_TYPE, "type"),
                (DDL_COLUMN_DEFAULT, "default"), (DDL_COLUMN_GENERATED, "generated"),
                (DDL_COLUMN_IDENTITY, "identity"), (DDL_COLUMN_PREVIOUS_NAME, "previous_name"))


def ddl_bytes(ddl: Mapping[str, Any]) -> bytes:
    """A change's ``ddl`` object -> the serialized ``pgfeed.v1.Ddl`` (rare: written plainly)."""
    out = [text_field(tag, str(ddl[k])) for tag, k in _DDL_TEXT if ddl.get(k) is not None]
    for col in ddl.get("columns") or ():
        parts = [DDL_COLUMN_ATTNUM + varint(int(col.get("attnum", 0)) & 0xFFFFFFFFFFFFFFFF)]
        parts += [text_field(tag, str(col[k])) for tag, k in _COLUMN_TEXT if col.get(k) is not None]
        if col.get("type_oid"):
            parts.append(DDL_COLUMN_TYPE_OID + varint(int(col["type_oid"])))
        if col.get("not_null"):
            parts.append(DDL_COLUMN_NOT_NULL + _TRUE_FLAG)
        if col.get("added"):
            parts.append(DDL_COLUMN_ADDED + _TRUE_FLAG)
        if "missing_value" in col:
            parts.append(ld_field(DDL_COLUMN_MISSING_VALUE, value_bytes(col["missing_value"])))
        out.append(ld_field(DDL_COLUMNS, b"".join(parts)))
    return b"".join(out)


def change_bytes(change: Change, kinds: Mapping[str, str] | None = None) -> bytes:
    """One decoded Change -> the serialized ``pgfeed.v1.Change``. ``kinds`` marks the json
    columns of its table (``RelationPlan.json_kinds`` of the version it was decoded with: a json
    column's value is JSON whatever Python type it loaded as; see ``value_bytes``)."""
    out: list[bytes] = []
    _change_parts(change, kinds, out)
    return b"".join(out)


# -- Transaction frames -------------------------------------------------------------------------------

def _header(txn: Transaction[object]) -> bytes:
    """Fields 1-5 and 9 of a Transaction: xid, commit_lsn, end_lsn, commit_ts, origin, backfill."""
    out = TRANSACTION_XID + varint(txn.xid) if txn.xid else b""
    if txn.commit_lsn:
        out += TRANSACTION_COMMIT_LSN + varint(txn.commit_lsn)
    if txn.end_lsn:
        out += TRANSACTION_END_LSN + varint(txn.end_lsn)
    # commit_ts: microseconds since PostgreSQL's epoch
    seconds, micros = divmod(txn.commit_ts, 1_000_000)
    out += _timestamp(TRANSACTION_COMMIT_TS, seconds + PG_EPOCH_UNIX, micros)
    if txn.origin is not None:
        out += text_field(TRANSACTION_ORIGIN, txn.origin)
    if txn.backfill is not None:
        out += text_field(TRANSACTION_BACKFILL, txn.backfill)
    return out


def _tail(cursor: str, final: bool) -> bytes:
    return text_field(TRANSACTION_CURSOR, cursor) + (_FINAL if final else b"")


_FINAL = TRANSACTION_FINAL + _TRUE_FLAG


def transaction_frames(txn: Transaction[Read], *, frame_bytes: int = FRAME_BYTES,
                       frame_changes: int = FRAME_CHANGES) -> list[bytes]:
    """A decoded Transaction (whole or a slice, as FeedReader pages give them) -> serialized
    ``pgfeed.v1.Transaction`` frames of at most ``frame_bytes`` bytes and ``frame_changes``
    changes each (a single larger change gets a frame of its own). Runs of row changes are
    written by the compiled encoder where it can (``transcode.run_bodies``), with their relation
    version's json columns on the reference path.

    Each frame's cursor is where to resume after it: ``commit_lsn:seq`` of its last change, and
    for the slice's last frame ``commit_lsn:last_seq`` (filtered-out changes included) or, once
    the transaction is whole, ``commit_lsn`` with ``final`` set.
    """
    header = _header(txn)
    lsn_text = format_lsn(txn.commit_lsn)
    last_seq = txn.last_seq if txn.last_seq is not None else txn.change_count - 1
    whole = last_seq >= txn.change_count - 1
    budget = frame_bytes - len(header) - 64  # room for the cursor and final flag
    frames: list[bytes] = []
    parts: list[bytes] = [header]
    size = count = 0
    previous_seq = -1
    join, small, changes_tag = b"".join, _SMALL, TRANSACTION_CHANGES
    for item in txn.changes:
        if type(item) is RowRun:
            kinds = item.plan.json_kinds or None

            def reference(change: Change, kinds: Mapping[str, str] | None = kinds) -> bytes:
                return change_bytes(change, kinds)

            bodies = run_bodies(item, False, b"", b"", reference)
            seq = item.first_seq
        else:
            bodies = [change_bytes(item)]  # no row: no json columns
            seq = item.seq
        for body in bodies:
            n = len(body)
            item_size = n + 3 if n < small else n + 11
            if count and (size + item_size > budget or count >= frame_changes):
                parts.append(_tail(f"{lsn_text}:{previous_seq}", False))
                frames.append(join(parts))
                parts, size, count = [header], 0, 0
            parts.append(changes_tag + (_V[n] if n < small else varint(n)))
            parts.append(body)
            size += item_size
            count += 1
            previous_seq = seq
            seq += 1
    cursor = lsn_text if whole else f"{lsn_text}:{last_seq}"
    parts.append(_tail(cursor, whole))
    frames.append(b"".join(parts))
    return frames


@dataclass(slots=True)
class _Open:
    """A transaction whose last frame sent had ``final=false``."""

    txn: Transaction[object]


class Framer:
    """Turns successive reader pages of one stream into frames, closing every transaction.

    A transaction split across pages whose remaining changes are all filtered out still gets
    its ``final=true`` frame (with no changes), so a client's reassembly never stays open.
    """

    def __init__(self, *, frame_bytes: int = FRAME_BYTES, frame_changes: int = FRAME_CHANGES) -> None:
        self.frame_bytes = frame_bytes
        self.frame_changes = frame_changes
        self._open: _Open | None = None

    def frames(self, transactions: Iterable[Transaction[Read]], next_cursor: Cursor,
               ) -> list[bytes]:
        """Frames for one page: its transactions, then a closing frame when ``next_cursor``
        (the page's ``next``) shows that a transaction left open has been read to its end."""
        out: list[bytes] = []
        for txn in transactions:
            if self._open is not None and self._open.txn.commit_lsn != txn.commit_lsn:
                out.append(self._close())
            out.extend(transaction_frames(txn, frame_bytes=self.frame_bytes,
                                          frame_changes=self.frame_changes))
            last_seq = txn.last_seq if txn.last_seq is not None else txn.change_count - 1
            self._open = None if last_seq >= txn.change_count - 1 else _Open(txn)
        if self._open is not None and next_cursor >= Cursor(self._open.txn.commit_lsn):
            out.append(self._close())
        return out

    def _close(self) -> bytes:
        assert self._open is not None
        txn = self._open.txn
        self._open = None
        return _header(txn) + _tail(format_lsn(txn.commit_lsn), True)
