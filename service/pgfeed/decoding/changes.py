"""Decode on read: a StoredTransaction's wire-form changes -> a Transaction of contract-shaped Changes.

Schema for a transaction = the catalog's versions before its commit, then Relation/Type frames
of its own payload as they come (an ALTER TABLE mid-transaction applies to later changes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias, final, overload

import orjson

from pgfeed_client._cursor import format_lsn
from pgfeed.assembler.framing import FRAME
from pgfeed.assembler.model import (
    BACKFILL_ORIGIN,
    Change,
    Op,
    StoredTransaction,
    Transaction,
    backfill_id_of,
)
from pgfeed.assembler.relations import RelationCatalog, RelationSchema, TypeName, resolve_value_oid
from pgfeed.decoding.plan import RelationPlan, WireRow
from pgfeed.decoding.values import RowLoader, load_value
from pgfeed.errors import SchemaError
from pgfeed.netorder import U32
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import (
    TAG_DELETE,
    TAG_INSERT,
    TAG_MESSAGE,
    TAG_RELATION,
    TAG_TRUNCATE,
    TAG_TYPE,
    TAG_UPDATE,
    UNCHANGED_TOAST,
    DeleteMessage,
    InsertMessage,
    LogicalMessage,
    RelationMessage,
    TruncateMessage,
    TypeMessage,
    UpdateMessage,
)
from pgfeed.pgoutput.messages import TUPLE_KEY as _KEY
from pgfeed.pgoutput.messages import TUPLE_NEW as _NEW
from pgfeed.pgoutput.messages import TUPLE_OLD as _OLD_ROW
from pgfeed.types.json import JsonText

__all__ = ["DEFAULT_PLACEHOLDER", "Fills", "LazyChange", "RawChange", "ReadChange", "RowSink",
           "Segment", "SunkChange", "ToastMode", "TransactionDecoder"]

ToastMode = Literal["omit", "placeholder", "reselect"]


class RowSink(Protocol):
    """Where a typed Arrow read writes runs of a table's row frames (``encoding.arrow_rows.
    ArrowSink``, one layer up: the decoder only hands it frames)."""

    def flags(self, backfill: bool, toast_null: bool, ops: set[Op] | None) -> int: ...

    def scan(self, payload: Any, pos: int, seq: int, stop: int, plan: RelationPlan,
             relation_id: int, stored: Any, flags: int) -> tuple[int, int, int] | None: ...
DEFAULT_PLACEHOLDER = "__pgfeed_unchanged_toast__"
# toast=reselect: (commit_lsn, seq) -> {column: (value oid, text)} the feed's fill index holds for
# that change (``feeds.toastindex``), empty when it filled nothing there.
Fills = Callable[[int, int], Mapping[str, tuple[int, str | None]]]

_OPS = {TAG_INSERT: Op.INSERT, TAG_UPDATE: Op.UPDATE, TAG_DELETE: Op.DELETE,
        TAG_TRUNCATE: Op.TRUNCATE, TAG_MESSAGE: Op.MESSAGE}
_READ_OPS = {**_OPS, TAG_INSERT: Op.READ}
_ROW_TAGS = frozenset({TAG_INSERT, TAG_UPDATE, TAG_DELETE})
_CHANGE_TAGS = frozenset(_OPS)
_frame_at = FRAME.unpack_from
_FRAME_SIZE = FRAME.size
_relation_id_at = U32.unpack_from
_UT = UNCHANGED_TOAST


_DDL_COLUMN_KEYS = ("attnum", "name", "type", "type_oid", "not_null", "default", "generated",
                    "identity", "added", "previous_name")


def ddl_event(buf: bytes | bytearray | memoryview, plan: RelationPlan, lsn: int,
              seq: int) -> Change | None:
    """A row of the feed's DDL table (``replication.ddl``) as an op "ddl" Change: ``schema``
    and ``table`` name the table the command touched, ``ddl`` holds ``command`` (the command
    tag), ``object_type`` and ``object`` (``pg_event_trigger_ddl_commands``' identity),
    ``table`` (``schema.table``), ``old_name``/``new_name`` (a rename of a column: column
    names; of the table: ``schema.table``; absent otherwise) and ``columns``: the table's
    columns after the command, each ``attnum``, ``name``, ``type`` (format_type), ``type_oid``,
    ``not_null``, ``default`` (the expression, null for none), and when they apply
    ``generated``/``identity`` (pg_attribute's letter), ``added`` (new since the table's
    previous capture), ``previous_name`` (renamed since it) and ``missing_value`` (PostgreSQL's
    attmissingval, encoded as the column's values are). None for a baseline row (not a command)."""
    msg = decode(buf)
    if not isinstance(msg, InsertMessage):
        return None
    row = dict(zip(plan.schema.column_names, msg.new_tuple.values, strict=False))
    command = row.get("command")
    if not isinstance(command, str) or command == "pgfeed baseline":
        return None
    schema, table = str(row.get("schema_name") or ""), str(row.get("table_name") or "")
    raw = row.get("columns")
    columns: Sequence[dict[str, Any]] = orjson.loads(raw) if isinstance(raw, str) else []
    out_columns = []
    for col in columns:
        out = {k: col[k] for k in _DDL_COLUMN_KEYS if k in col}
        out.setdefault("not_null", False)
        out.setdefault("default", None)
        missing = col.get("missing")
        if missing is not None:
            out["missing_value"] = load_value(resolve_value_oid(int(col.get("type_oid", 0)), None),
                                              missing)
        out_columns.append(out)
    ddl: dict[str, Any] = {"command": command, "object_type": row.get("object_type"),
                           "object": row.get("object"), "table": f"{schema}.{table}"}
    if row.get("old_name") is not None:
        ddl["old_name"] = row["old_name"]
        ddl["new_name"] = row.get("new_name")
    ddl["columns"] = out_columns
    return Change(lsn, seq, Op.DDL, schema=schema, table=table, ddl=ddl)


@final  # encoders test ``type(c) is RawChange``: no subclass may slip past
class RawChange:
    """A row change still in wire form (``decode(..., lazy=True)``): encoders that can write it
    straight from the bytes do (``encoding.transcode``), anything else calls ``load``."""

    __slots__ = ("buf", "commit_lsn", "decoder", "lsn", "op", "plan", "seq", "tag")

    def __init__(self, lsn: int, seq: int, op: Op, tag: int, buf: bytes | bytearray,
                 plan: RelationPlan, commit_lsn: int, decoder: TransactionDecoder) -> None:
        self.lsn = lsn
        self.seq = seq
        self.op = op
        self.tag = tag
        self.buf = buf
        self.plan = plan
        self.commit_lsn = commit_lsn
        self.decoder = decoder

    @property
    def schema(self) -> str:
        return self.plan.schema.schema

    @property
    def table(self) -> str:
        return self.plan.schema.table

    def load(self) -> Change:
        """The decoded Change (SchemaError when the bytes do not fit the relation version)."""
        change = self.decoder._row(self.tag, self.buf, self.plan, self.lsn, self.seq, self.commit_lsn)
        change.op = self.op  # a backfill's Insert frames are reads
        return change


Rows = tuple[dict[str, Any] | None, dict[str, Any] | None, int | None]  # new, old, old kind


def _fast_rows(tag: int, data: bytes | bytearray, wire_row: WireRow) -> Rows:
    """Insert/Update/Delete bytes -> loaded (new, old, old kind); raises unless every column is
    text or NULL, the layout is exactly right and every value loads."""
    marker = data[5]
    new = old = old_kind = None
    if tag == TAG_INSERT:
        if marker != _NEW:
            raise ValueError("no new tuple")
        new, pos = wire_row(data, 6)
    elif tag == TAG_UPDATE:
        if marker == _NEW:
            new, pos = wire_row(data, 6)
        elif marker == _KEY or marker == _OLD_ROW:
            old_kind = marker
            old, pos = wire_row(data, 6)
            if data[pos] != _NEW:
                raise ValueError("no new tuple")
            new, pos = wire_row(data, pos + 1)
        else:
            raise ValueError("bad marker")
    else:
        if marker != _KEY and marker != _OLD_ROW:
            raise ValueError("bad marker")
        old_kind = marker
        old, pos = wire_row(data, 6)
    if pos != len(data):
        raise ValueError("trailing bytes")
    return new, old, old_kind


def _slow_rows(msg: InsertMessage | UpdateMessage | DeleteMessage, load: RowLoader,
               new_values: tuple[Any, ...] | None = None) -> tuple[
                   dict[str, Any] | None, dict[str, Any] | None, bool, int | None]:
    """The reference path: decoded TupleData through ``row_loader`` (TOAST, binary, fallbacks);
    ``new_values`` stand in for the new tuple's values (unchanged TOAST filled)."""
    new = old = None
    old_toast = False
    old_kind = None
    if not isinstance(msg, DeleteMessage):
        new = load(msg.new_tuple.values if new_values is None else new_values)
    if not isinstance(msg, InsertMessage) and msg.old_tuple is not None:
        values = msg.old_tuple.values
        old, old_toast, old_kind = load(values), _UT in values, msg.old_kind
    return new, old, old_toast, old_kind


def _fill(values: tuple[Any, ...], plan: RelationPlan,
          fills: Mapping[str, tuple[int, str | None]]) -> tuple[tuple[Any, ...] | None, list[str]]:
    """``values`` with unchanged TOAST columns replaced by the fill index's text for them (when
    the value type is still the column's; None when nothing was), and the names filled."""
    out = list(values)
    filled = []
    names, oids = plan.column_names, plan.value_oids
    for i, v in enumerate(values):
        if v is _UT and i < len(names):
            held = fills.get(names[i])
            if held is not None and held[0] == oids[i]:
                out[i] = held[1]
                filled.append(names[i])
    return (tuple(out) if filled else None), filled


def _json_nulls(change: Change, columns: frozenset[str]) -> dict[str, list[str]] | None:
    """Per image of ``change``, the json/jsonb ``columns`` holding the JSON document ``null``
    (``JsonText("null")``, where SQL NULL is None): what a JSON event cannot say in the value."""
    found: dict[str, list[str]] | None = None
    for image, row in (("key", change.key), ("before", change.before), ("after", change.after)):
        if not row:
            continue
        names = [n for n in columns if _is_json_null(row.get(n))]
        if names:
            if found is None:
                found = {}
            found[image] = sorted(names)
    return found


def _is_json_null(value: Any) -> bool:
    return type(value) is JsonText and value.text == "null"


@final
class Segment:
    """Stands in a decoded transaction's ``changes`` for ``rows`` consecutive row changes an
    ``ArrowSink`` holds (``decode(..., sink=)``), in order."""

    __slots__ = ("rows",)

    def __init__(self, rows: int) -> None:
        self.rows = rows


# What a decoded transaction holds, by how it was read (``TransactionDecoder.decode``): ``Change``s
# alone by default; with ``lazy``, row changes still in wire form beside them; with a ``sink``,
# runs of rows the sink wrote; either, when the read is chosen at run time.
LazyChange: TypeAlias = Change | RawChange
SunkChange: TypeAlias = Change | Segment
ReadChange: TypeAlias = Change | RawChange | Segment


class TransactionDecoder:
    """Turns stored transactions into served ones, per the change event contract.

    - ``key``: replica-identity columns of the row before the change (of the new row for an
      insert, and for an update that sent no old part); None when the relation has none
      (REPLICA IDENTITY NOTHING, or DEFAULT without a primary key). Under FULL every column is
      flagged as identity by pgoutput, so ``key`` is the whole old row.
    - ``before``: only when the old row came whole ('O', REPLICA IDENTITY FULL).
    - Unchanged TOAST columns are listed in ``unchanged_toast``; ``toast`` decides ``after``:
      ``omit`` leaves them out, ``placeholder`` sets ``placeholder``, ``reselect`` takes them
      from ``fills`` (the feed's fill index: a function of the change's position alone) and
      leaves out what it has not; filled columns are listed in ``toast_filled``.

    Stateless between calls apart from caches (not thread-safe: callers serialise).
    """

    def __init__(self, catalog: RelationCatalog, *, toast: ToastMode = "omit",
                 placeholder: str = DEFAULT_PLACEHOLDER, fills: Fills | None = None,
                 ddl_table: str | None = None) -> None:
        if toast not in ("omit", "placeholder", "reselect"):
            raise ValueError(f"toast must be omit, placeholder or reselect, not {toast!r}")
        self.catalog = catalog
        # ``schema.table`` of the feed's DDL table (option ddl "capture"): its rows are served as
        # op "ddl" events, never as row changes
        self.ddl_table = ddl_table
        self.toast = toast
        self.placeholder = placeholder
        self.fills = fills
        self._plans: dict[RelationSchema, RelationPlan] = {}
        # (commit_lsn, payload size, seq) -> where a page that stopped before that seq left off
        self._resume: dict[tuple[int, int, int],
                           tuple[int, int, dict[int, RelationPlan], dict[int, TypeName]]] = {}

    @overload
    def decode(self, stored: StoredTransaction, *, first_seq: int = 0,
               max_changes: int | None = None, tables: set[str] | None = None,
               ops: set[Op] | None = None, lazy: Literal[False] = False,
               sink: None = None) -> Transaction[Change]: ...

    @overload
    def decode(self, stored: StoredTransaction, *, first_seq: int = 0,
               max_changes: int | None = None, tables: set[str] | None = None,
               ops: set[Op] | None = None, lazy: bool, sink: None = None,
               ) -> Transaction[LazyChange]: ...

    @overload
    def decode(self, stored: StoredTransaction, *, first_seq: int = 0,
               max_changes: int | None = None, tables: set[str] | None = None,
               ops: set[Op] | None = None, lazy: bool = False,
               sink: RowSink) -> Transaction[SunkChange]: ...

    @overload
    def decode(self, stored: StoredTransaction, *, first_seq: int = 0,
               max_changes: int | None = None, tables: set[str] | None = None,
               ops: set[Op] | None = None, lazy: bool = False,
               sink: RowSink | None = None) -> Transaction[ReadChange]: ...

    def decode(self, stored: StoredTransaction, *, first_seq: int = 0,
               max_changes: int | None = None, tables: set[str] | None = None,
               ops: set[Op] | None = None, lazy: bool = False,
               sink: RowSink | None = None) -> Transaction[ReadChange]:
        """Decode changes ``first_seq`` onwards of ``stored``.

        ``lazy`` leaves row changes as ``RawChange`` (wire bytes and their relation version) for
        encoders that write them without loading values (a change they cannot write, such as
        one with unchanged TOAST, is loaded by ``RawChange.load``).

        ``max_changes`` bounds the changes *scanned* (seq ``first_seq`` to
        ``first_seq + max_changes - 1``), not the ones returned: ``tables`` (``"schema.table"``
        names) and ``ops`` filters skip changes without breaking cursor continuity, and the
        result's ``last_seq`` is the last seq scanned (``first_seq - 1`` if none). A truncate
        passes ``tables`` if it names any of them; a message names no table, so any ``tables``
        filter skips it.

        ``sink`` (a typed Arrow read of one table) takes runs of row changes it can write
        straight from their frames: they stand in ``changes`` as ``Segment`` counts;
        the rest are decoded as usual.
        """
        commit_lsn = stored.commit_lsn
        stop = first_seq + max_changes if max_changes is not None else 1 << 62
        types: dict[int, TypeName] = {}
        changes: list[ReadChange] = []
        append = changes.append
        seq = -1
        last = first_seq - 1
        if max_changes is not None and max_changes <= 0:
            stop = first_seq
        payload = stored.buffer()
        origin = stored.origin
        backfill = backfill_id_of(origin)
        ops_of = _OPS
        if backfill is not None:  # a backfill chunk: its Insert frames are rows read, op "read"
            origin, ops_of = BACKFILL_ORIGIN, _READ_OPS
        pos, end = 0, len(payload)
        plans: dict[int, RelationPlan] = {}  # relation_id -> plan in force at this point of the payload
        # typed rows show unchanged TOAST as null unless filled (toast=reselect: the reference's)
        sink_flags = 0 if sink is None else sink.flags(backfill is not None,
                                                      self.toast != "reselect", ops)
        ddl_table = self.ddl_table
        ddl_ops = ddl_table is not None and (ops is None or Op.DDL in ops)
        resume_key = (commit_lsn, end, first_seq)
        resume = self._resume.get(resume_key) if first_seq else None
        if resume is not None:  # the next page of a transaction read page by page
            pos, seq, saved_plans, saved_types = resume
            plans.update(saved_plans)
            types.update(saved_types)
        while pos < end:
            frame_start = pos
            lsn, length = _frame_at(payload, pos)
            pos += _FRAME_SIZE
            tag = payload[pos]
            if tag not in _CHANGE_TAGS:  # Relation/Type (Begin/Commit/Origin are never stored)
                buf = payload[pos:pos + length]
                pos += length
                if tag == TAG_RELATION:
                    rel = decode(buf)
                    assert isinstance(rel, RelationMessage)
                    plans[rel.relation_id] = self._payload_plan(rel, commit_lsn, types)
                elif tag == TAG_TYPE:
                    typ = decode(buf)
                    assert isinstance(typ, TypeMessage)
                    types[typ.type_oid] = TypeName(typ.namespace, typ.name)
                continue
            seq += 1
            if seq < first_seq:
                pos += length
                continue
            if seq >= stop:
                if len(self._resume) >= 256:
                    self._resume.clear()
                self._resume[(commit_lsn, end, stop)] = (frame_start, seq - 1, dict(plans),
                                                          dict(types))
                break
            buf = payload[pos:pos + length]
            pos += length
            last = seq
            op = ops_of[tag]
            if ops is not None and op not in ops and not ddl_ops:
                continue
            if tag in _ROW_TAGS:
                relation_id = _relation_id_at(buf, 1)[0]
                plan = plans.get(relation_id)
                if plan is None:
                    plan = plans[relation_id] = self._plan(relation_id, commit_lsn, seq)
                if ddl_table is not None and plan.name == ddl_table:
                    event = ddl_event(buf, plan, lsn, seq) if ddl_ops and tag == TAG_INSERT \
                        and backfill is None else None
                    if event is not None and (tables is None or event.ddl is not None
                                              and event.ddl["table"] in tables):
                        append(event)
                    continue
                if ops is not None and op not in ops:
                    continue
                if tables is not None and plan.name not in tables:
                    continue
                if sink is not None:
                    ran = sink.scan(payload, frame_start, seq - 1, stop, plan, relation_id, stored,
                                    sink_flags)
                    if ran is not None:
                        pos, seq, rows = ran
                        last = seq
                        if rows:
                            held = changes[-1] if changes else None
                            if type(held) is Segment:
                                held.rows += rows
                            else:
                                append(Segment(rows))
                        continue
                if lazy and sink is None:
                    append(RawChange(lsn, seq, op, tag, buf, plan, commit_lsn, self))
                else:
                    change = self._row(tag, buf, plan, lsn, seq, commit_lsn)
                    change.op = op
                    append(change)
            elif tag == TAG_TRUNCATE:
                if ops is not None and op not in ops:
                    continue
                trunc = decode(buf)
                assert isinstance(trunc, TruncateMessage)
                names = [(plans.get(r) or self._plan(r, commit_lsn, seq)).name
                         for r in trunc.relation_ids]
                if tables is not None and tables.isdisjoint(names):
                    continue
                append(Change(lsn, seq, Op.TRUNCATE, tables=names,
                              options={"cascade": trunc.cascade,
                                       "restart_identity": trunc.restart_identity}))
            else:
                if tables is not None or (ops is not None and op not in ops):
                    continue
                lmsg = decode(buf)
                assert isinstance(lmsg, LogicalMessage)
                append(Change(lsn, seq, Op.MESSAGE, prefix=lmsg.prefix, content=lmsg.content,
                              transactional=lmsg.transactional))
        return Transaction(stored.xid, commit_lsn, stored.end_lsn, stored.commit_ts, origin,
                           changes, stored.change_count, last, backfill)

    def is_ddl(self, plan: RelationPlan) -> bool:
        """Whether ``plan`` is the feed's DDL table (its rows are never row changes)."""
        return self.ddl_table is not None and plan.name == self.ddl_table

    def wire_changes(self, stored: StoredTransaction) -> Iterator[
            tuple[int, int, bytes, RelationSchema | None, RelationSchema | None]]:
        """``(seq, tag, message, schema, previous)`` for each change of ``stored`` in order, with
        the relation version in force (None for truncates and messages), and for each Relation
        frame ``(-1, TAG_RELATION, frame, new version, version it replaces or None)``: what the
        fill index (``feeds.toastindex``) walks."""
        commit_lsn = stored.commit_lsn
        types: dict[int, TypeName] = {}
        plans: dict[int, RelationPlan] = {}
        payload = bytes(stored.payload) if not isinstance(stored.payload, bytes) else stored.payload
        pos, end, seq = 0, len(payload), -1
        while pos < end:
            _lsn, length = _frame_at(payload, pos)
            pos += _FRAME_SIZE
            tag = payload[pos]
            buf = payload[pos:pos + length]
            pos += length
            if tag == TAG_RELATION:
                rel = decode(buf)
                assert isinstance(rel, RelationMessage)
                previous = plans.get(rel.relation_id)
                before = previous.schema if previous is not None else \
                    self.catalog.find(rel.relation_id, commit_lsn)
                plan = plans[rel.relation_id] = self._payload_plan(rel, commit_lsn, types)
                yield -1, tag, buf, plan.schema, before
            elif tag == TAG_TYPE:
                typ = decode(buf)
                assert isinstance(typ, TypeMessage)
                types[typ.type_oid] = TypeName(typ.namespace, typ.name)
            elif tag in _CHANGE_TAGS:
                seq += 1
                schema = None
                if tag in _ROW_TAGS:
                    relation_id = _relation_id_at(buf, 1)[0]
                    found = plans.get(relation_id)
                    if found is None:
                        found = plans[relation_id] = self._plan(relation_id, commit_lsn, seq)
                    schema = found.schema
                yield seq, tag, buf, schema, None

    # -- relations -------------------------------------------------------------------------------
    def _plan(self, relation_id: int, commit_lsn: int, seq: int) -> RelationPlan:
        schema = self.catalog.find(relation_id, commit_lsn)
        if schema is None:
            raise SchemaError(f"change {seq} of transaction {format_lsn(commit_lsn)} names "
                              f"relation id {relation_id}, which the feed's schema history does "
                              "not define before it")
        plan = self._plans.get(schema)
        if plan is None:
            if len(self._plans) > 10_000:
                self._plans.clear()
            plan = self._plans[schema] = RelationPlan.of(schema)
        return plan

    def _payload_plan(self, msg: RelationMessage, commit_lsn: int,
                      types: dict[int, TypeName]) -> RelationPlan:
        built = self.catalog.build(msg, commit_lsn, types)
        for known in self.catalog.versions(msg.relation_id):  # reuse the numbered version
            if known.valid_from == commit_lsn and known.same_shape(built):
                plan = self._plans.get(known)
                if plan is None:
                    plan = self._plans[known] = RelationPlan.of(known)
                return plan
        before = self.catalog.find(msg.relation_id, commit_lsn)
        if before is not None and before.same_shape(built):  # a re-sent, unchanged Relation
            return self._plan(msg.relation_id, commit_lsn, -1)
        return RelationPlan.of(built)

    # -- rows ------------------------------------------------------------------------------------
    def _row(self, tag: int, buf: bytes | bytearray, plan: RelationPlan, lsn: int, seq: int,
             commit_lsn: int) -> Change:
        toast: list[str] = []
        filled: list[str] | None = None
        try:  # wire bytes straight to values: rows of only 't'/'n' columns (nearly all of them)
            after, old, old_kind = _fast_rows(tag, buf, plan.wire_row)
            old_toast = False
        except Exception:  # noqa: BLE001 - anything unusual: the reference path below decides
            msg = decode(buf)
            assert isinstance(msg, (InsertMessage, UpdateMessage, DeleteMessage))
            new_values = None
            if not isinstance(msg, DeleteMessage) and _UT in msg.new_tuple.values:
                values = msg.new_tuple.values
                names = plan.column_names
                toast = [names[i] for i, v in enumerate(values) if v is _UT and i < len(names)]
                if self.toast == "reselect":
                    fills = self.fills(commit_lsn, seq) if self.fills is not None else None
                    new_values, filled = _fill(values, plan, fills) if fills else (None, [])
            try:
                after, old, old_toast, old_kind = _slow_rows(msg, plan.load, new_values)
            except ValueError as exc:
                raise SchemaError(f"{_OPS[tag].value} at {format_lsn(lsn)} (transaction "
                                  f"{format_lsn(commit_lsn)}, seq {seq}) does not fit "
                                  f"{plan.name} version {plan.schema.version}: {exc}") from None
        if old_toast and old is not None:  # an old image without the value: unknown, dropped
            old = {k: v for k, v in old.items() if v is not _UT}
        if tag == TAG_INSERT:
            assert after is not None
            change = self._insert(after, toast, plan, lsn, seq)
        elif tag == TAG_UPDATE:
            assert after is not None
            change = self._update(after, toast, old, old_kind, plan, lsn, seq)
        else:
            assert old is not None
            change = self._delete(old, old_kind, plan, lsn, seq)
        change.table_version = plan.schema.version
        if toast:
            self._unchanged_toast(change, filled)
        if plan.json_columns:
            change.json_null = _json_nulls(change, plan.json_columns)
        return change

    def _insert(self, after: dict[str, Any], toast: list[str], plan: RelationPlan, lsn: int,
                seq: int) -> Change:
        key = plan.key_of(after)
        schema = plan.schema
        if not toast:
            return Change(lsn, seq, Op.INSERT, schema.schema, schema.table, key, None, after)
        if key is not None:
            key = {k: v for k, v in key.items() if v is not _UT}
        return Change(lsn, seq, Op.INSERT, schema.schema, schema.table, key, None, after, toast)

    def _update(self, after: dict[str, Any], toast: list[str], old: dict[str, Any] | None,
                old_kind: int | None, plan: RelationPlan, lsn: int, seq: int) -> Change:
        key_names = plan.key_names
        before = None
        if old is None:
            key = plan.key_of(after)
        else:
            if old_kind == _OLD_ROW:
                before = old
            key = {k: old[k] for k in key_names if k in old} if key_names else None
        if toast and key is not None and old is None:
            key = {k: v for k, v in key.items() if v is not _UT}
        schema = plan.schema
        return Change(lsn, seq, Op.UPDATE, schema.schema, schema.table, key, before, after, toast)

    def _delete(self, old: dict[str, Any], old_kind: int | None, plan: RelationPlan, lsn: int,
                seq: int) -> Change:
        key_names = plan.key_names
        key = {k: old[k] for k in key_names if k in old} if key_names else None
        before = old if old_kind == _OLD_ROW else None
        schema = plan.schema
        return Change(lsn, seq, Op.DELETE, schema.schema, schema.table, key, before)

    # -- unchanged TOAST ---------------------------------------------------------------------------
    def _unchanged_toast(self, change: Change, filled: list[str] | None) -> None:
        """Apply the toast mode to ``after``: ``filled`` are the columns the fill index gave."""
        after = change.after
        assert after is not None
        if self.toast == "placeholder":
            for name in change.unchanged_toast:
                after[name] = self.placeholder
            return
        for name in change.unchanged_toast:
            if after.get(name) is _UT:
                del after[name]
        if self.toast == "reselect":
            change.toast_filled = filled or []
