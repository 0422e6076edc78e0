"""Decode on read: a StoredTransaction's wire-form changes -> a served Transaction: runs of row
changes still in wire form (``runs.RowRun``, loaded on demand) and contract-shaped Changes for the
rest (truncates, messages, DDL events).

Schema for a transaction = the catalog's versions before its commit, then Relation/Type frames
of its own payload as they come (an ALTER TABLE mid-transaction applies to later changes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from pgfeed.assembler.chunked import ChunkedPayload, segments
from pgfeed.assembler.framing import extent, walk
from pgfeed.assembler.model import BACKFILL_ORIGIN, StoredTransaction, backfill_id_of
from pgfeed.decoding.model import Change, Op, Transaction
from pgfeed.decoding.plan import RelationPlan
from pgfeed.decoding.relations import RelationCatalog, RelationSchema, TypeName, resolve_value_oid
from pgfeed.decoding.runs import (
    DEFAULT_PLACEHOLDER,
    Fills,
    Read,
    RowLoading,
    RowRun,
    ToastMode,
    loaded,
)
from pgfeed.decoding.values import load_value
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
    InsertMessage,
    LogicalMessage,
    RelationMessage,
    TruncateMessage,
    TypeMessage,
)
from pgfeed_client._cursor import format_lsn

__all__ = ["DEFAULT_PLACEHOLDER", "Fills", "Read", "RowLoading", "RowRun", "ToastMode",
           "TransactionDecoder", "ddl_event"]

_OPS = {TAG_INSERT: Op.INSERT, TAG_UPDATE: Op.UPDATE, TAG_DELETE: Op.DELETE,
        TAG_TRUNCATE: Op.TRUNCATE, TAG_MESSAGE: Op.MESSAGE}
_READ_OPS = {**_OPS, TAG_INSERT: Op.READ}
_ROW_TAGS = frozenset({TAG_INSERT, TAG_UPDATE, TAG_DELETE})
_CHANGE_TAGS = frozenset(_OPS)
_relation_id_at = U32.unpack_from


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
        self.catalog = catalog
        # how the runs this decoder returns load their values (checks ``toast``)
        self.loading = RowLoading(toast, placeholder, fills)
        # ``schema.table`` of the feed's DDL table (option ddl "capture"): its rows are served as
        # op "ddl" events, never as row changes
        self.ddl_table = ddl_table
        self._plans: dict[RelationSchema, RelationPlan] = {}
        # (commit_lsn, payload size, seq) -> where a page that stopped before that seq left off
        self._resume: dict[tuple[int, int, int],
                           tuple[int, int, dict[int, RelationPlan], dict[int, TypeName]]] = {}

    def decode(self, stored: StoredTransaction, *, first_seq: int = 0,
               max_changes: int | None = None, tables: set[str] | None = None,
               ops: set[Op] | None = None) -> Transaction[Read]:
        """Changes ``first_seq`` onwards of ``stored``: row changes as ``RowRun``s (runs of
        consecutive row frames of one relation version that the filters keep, loaded on
        demand), truncates, messages and DDL events as ``Change``s, in order.

        ``max_changes`` bounds the changes *scanned* (seq ``first_seq`` to
        ``first_seq + max_changes - 1``), not the ones returned: ``tables`` (``"schema.table"``
        names) and ``ops`` filters skip changes without breaking cursor continuity, and the
        result's ``last_seq`` is the last seq scanned (``first_seq - 1`` if none). A truncate
        passes ``tables`` if it names any of them; a message names no table, so any ``tables``
        filter skips it. A run's relation must be known here (SchemaError otherwise); whether
        its bytes fit the version is found when it is loaded.
        """
        commit_lsn = stored.commit_lsn
        stop = first_seq + max_changes if max_changes is not None else 1 << 62
        types: dict[int, TypeName] = {}
        changes: list[Read] = []
        append = changes.append
        seq = -1
        last = first_seq - 1
        if max_changes is not None and max_changes <= 0:
            stop = first_seq
        whole = stored.payload
        if not isinstance(whole, ChunkedPayload):
            whole = stored.buffer()
        total = len(whole)
        origin = stored.origin
        backfill = backfill_id_of(origin)
        ops_of = _OPS
        read = backfill is not None
        if read:  # a backfill chunk: its Insert frames are rows read, op "read"
            origin, ops_of = BACKFILL_ORIGIN, _READ_OPS
        at_offset = 0  # the payload's offset the walk goes on from
        plans: dict[int, RelationPlan] = {}  # relation_id -> plan in force at this point of the payload
        ddl_table = self.ddl_table
        ddl_ops = ddl_table is not None and (ops is None or Op.DDL in ops)
        loading = self.loading
        # the row tags the ops filter keeps (a run takes its next rows with these tags)
        row_tags = bytes(t for t in sorted(_ROW_TAGS) if ops is None or ops_of[t] in ops)
        resume = self._resume.get((commit_lsn, total, first_seq)) if first_seq else None
        if resume is not None:  # the next page of a transaction read page by page
            at_offset, seq, saved_plans, saved_types = resume
            plans.update(saved_plans)
            types.update(saved_types)
        # The payload is walked a segment at a time (``assembler.chunked``): all of it when it is
        # in memory, one chunk of the log's at a time when it is read on demand, so a run (whose
        # frames are ``payload[start:end]`` of one segment) never spans two chunks.
        base, over = 0, -1
        payload: bytes | bytearray = b""
        while at_offset < total:
            if not base <= at_offset < base + len(payload) or over == at_offset:
                base, payload = segments(whole, at_offset)
            pos, end = at_offset - base, len(payload)
            at_offset = -1  # where the walk goes on: set below, or it is over
            for at, lsn, start, frame_end in walk(payload, pos, end):
                if frame_end > end:  # a frame larger than a chunk: read joined with the next ones
                    if over == base + at:
                        raise SchemaError(f"transaction {format_lsn(commit_lsn)}: the frame at "
                                          f"offset {base + at} runs past its payload's end")
                    at_offset = over = base + at
                    break
                tag = payload[start]
                if tag not in _CHANGE_TAGS:  # Relation/Type (Begin/Commit/Origin are never stored)
                    if tag == TAG_RELATION:
                        rel = decode(payload[start:frame_end])
                        assert isinstance(rel, RelationMessage)
                        plans[rel.relation_id] = self._payload_plan(rel, commit_lsn, types)
                    elif tag == TAG_TYPE:
                        typ = decode(payload[start:frame_end])
                        assert isinstance(typ, TypeMessage)
                        types[typ.type_oid] = TypeName(typ.namespace, typ.name)
                    continue
                seq += 1
                if seq < first_seq:
                    continue
                if seq >= stop:
                    if len(self._resume) >= 256:
                        self._resume.clear()
                    self._resume[(commit_lsn, total, stop)] = (base + at, seq - 1, dict(plans),
                                                               dict(types))
                    break
                last = seq
                op = ops_of[tag]
                if ops is not None and op not in ops and not ddl_ops:
                    continue
                if tag in _ROW_TAGS:
                    relation_id = _relation_id_at(payload, start + 1)[0]
                    plan = plans.get(relation_id)
                    if plan is None:
                        plan = plans[relation_id] = self._plan(relation_id, commit_lsn, seq)
                    if ddl_table is not None and plan.name == ddl_table:
                        event = ddl_event(payload[start:frame_end], plan, lsn, seq) \
                            if ddl_ops and tag == TAG_INSERT and not read else None
                        if event is not None and (tables is None or event.ddl is not None
                                                  and event.ddl["table"] in tables):
                            append(event)
                        continue
                    if ops is not None and op not in ops:
                        continue
                    if tables is not None and plan.name not in tables:
                        continue
                    run = RowRun(payload, at, frame_end, seq, 1, plan, read, commit_lsn, loading)
                    append(run)
                    # the rows right after it of the same relation join it, in one step
                    taken_to, taken = extent(payload, frame_end, end, relation_id, stop - seq - 1,
                                             row_tags)
                    if taken:
                        run.end = taken_to
                        run.count += taken
                        seq = last = seq + taken
                        at_offset = base + taken_to
                        break
                elif tag == TAG_TRUNCATE:
                    if ops is not None and op not in ops:
                        continue
                    trunc = decode(payload[start:frame_end])
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
                    lmsg = decode(payload[start:frame_end])
                    assert isinstance(lmsg, LogicalMessage)
                    append(Change(lsn, seq, Op.MESSAGE, prefix=lmsg.prefix, content=lmsg.content,
                                  transactional=lmsg.transactional))
            else:  # the segment's frames are all walked: the next segment
                at_offset = base + end
            if at_offset < 0:
                break
        return Transaction(stored.xid, commit_lsn, stored.end_lsn, stored.commit_ts, origin,
                           changes, stored.change_count, last, backfill)

    def load(self, stored: StoredTransaction, **filters: Any) -> Transaction[Change]:
        """``decode`` with every run loaded (``runs.loaded``): the reference form, for readers
        without a compiled twin and for tests."""
        return loaded(self.decode(stored, **filters))

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
        seq = -1
        for _at, _lsn, start, stop in walk(payload):
            tag = payload[start]
            buf = payload[start:stop]
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
