"""Capture's schema annotations (``assembler.annotations``): what a new relation version's
Relation message does not say, written into the schema history of the transaction that brought
it, so the change log keeps it durably with the version.

- Every feed: after each Relation frame, the missing values PostgreSQL holds for that
  relation's columns (``pg_attribute.attmissingval``: rows that existed before an ``ADD COLUMN
  ... DEFAULT`` read that value, and no change will ever carry it), read from the source catalog
  when capture receives the Relation. The read can race a later DDL (the catalog is read now,
  the Relation may be older): a column dropped or the table rewritten meanwhile reads as none.
- Feeds with option ``ddl: "capture"``: the feed's DDL table's rows (``replication.ddl``) are
  the exact record, at their position: each becomes a ``ddl`` annotation (columns with
  ``attnum``, ``previous_name``, ``added``, missing value) and the catalogue read is skipped.

Relation messages are rare (one per table and invalidation), so the catalogue read is one query
per batch that has some; finding DDL rows costs one ``bytes.find`` per payload.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson
import psycopg

from pgfeed.assembler.annotations import annotation_frame
from pgfeed.assembler.framing import FRAME
from pgfeed.assembler.model import StoredTransaction
from pgfeed.dsn import scrub
from pgfeed.errors import SourceError
from pgfeed.netorder import U32
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import TAG_INSERT, TAG_RELATION, InsertMessage, RelationMessage
from pgfeed.replication.connect import connect

__all__ = ["DDL_SCHEMA", "SchemaAnnotator", "ddl_row", "ddl_table_name"]

log = logging.getLogger("pgfeed.capture")

DDL_SCHEMA = "pgfeed"
_MISSING = ("SELECT a.attrelid::int8, a.attname, (a.attmissingval::text::text[])[1] "
            "FROM pg_attribute a WHERE a.attrelid = ANY(%s::oid[]) AND a.attnum > 0 "
            "AND NOT a.attisdropped AND a.atthasmissing")


def ddl_table_name(feed: str) -> str:
    """The table (in schema ``pgfeed``) a feed with ``ddl: "capture"`` records DDL in."""
    return f"{feed}_ddl"


def ddl_row(relation: RelationMessage, message: bytes | memoryview) -> dict[str, Any] | None:
    """A DDL table row (an Insert of ``relation``) as ``{column: text}``, ``columns`` parsed;
    None when the message is not such an insert."""
    msg = decode(message)
    if not isinstance(msg, InsertMessage) or msg.relation_id != relation.relation_id:
        return None
    row: dict[str, Any] = {}
    for col, value in zip(relation.columns, msg.new_tuple.values, strict=False):
        row[col.name] = value if isinstance(value, str) or value is None else None
    columns = row.get("columns")
    row["columns"] = orjson.loads(columns) if isinstance(columns, str) else []
    return row


class SchemaAnnotator:
    """Adds annotation frames to the schema frames of each assembled transaction (capture thread)."""

    def __init__(self, dsn: str, ddl_table: str | None = None) -> None:
        self.dsn = dsn
        self.ddl_table = ddl_table  # the feed's DDL table name in schema pgfeed (None: no capture)
        self._ddl: RelationMessage | None = None  # its Relation, once this session sent it
        self._pattern = b""
        self._conn: psycopg.Connection[Any] | None = None

    def restart(self) -> None:
        """A new replication session: pgoutput sends every Relation again."""
        self._ddl, self._pattern = None, b""

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def annotate(self, batch: list[StoredTransaction]) -> list[StoredTransaction]:
        """``batch`` with annotation frames added (in place) to its transactions' schema frames."""
        wanted: dict[int, list[tuple[StoredTransaction, int]]] = {}
        for txn in batch:
            if txn.schema_frames:
                for i, frame in enumerate(txn.schema_frames):
                    if frame[FRAME.size] != TAG_RELATION:
                        continue
                    rel = decode(memoryview(frame)[FRAME.size:])
                    assert isinstance(rel, RelationMessage)
                    if self.ddl_table is not None and rel.namespace == DDL_SCHEMA \
                            and rel.relation_name == self.ddl_table:
                        self._ddl = rel
                        self._pattern = bytes((TAG_INSERT,)) + U32.pack(rel.relation_id) + b"N"
                    elif self.ddl_table is None:
                        wanted.setdefault(rel.relation_id, []).append((txn, i))
            if self._pattern and txn.change_count:
                self._ddl_rows(txn)
        if wanted:
            self._catalog_notes(wanted)
        return batch

    def _ddl_rows(self, txn: StoredTransaction) -> None:
        """A ``ddl`` annotation for each of the DDL table's rows in ``txn``, placed among its
        schema frames by position."""
        assert self._ddl is not None
        payload = txn.payload
        # A transaction past capture's memory went to disk and can be read only once, by the
        # log: its DDL rows are served but annotate nothing (docs/design.md, issue 27.2).
        if not isinstance(payload, (bytes, bytearray)) or payload.find(self._pattern) < 0:
            return
        notes: list[tuple[int, bytes]] = []
        for lsn, message in txn.frames():
            if message[0] != TAG_INSERT or bytes(message[:6]) != self._pattern:
                continue
            row = ddl_row(self._ddl, message)
            if row is None or not row.get("table_oid"):
                continue
            columns = [{k: c[k] for k in ("attnum", "name", "previous_name", "added", "missing")
                        if c.get(k) is not None} for c in row["columns"]]
            notes.append((lsn, annotation_frame(lsn, {
                "kind": "ddl", "relation_id": int(row["table_oid"]), "command": row.get("command"),
                "columns": columns})))
        if notes:
            frames = [(FRAME.unpack_from(f)[0], n, f) for n, f in enumerate(txn.schema_frames)]
            frames += [(lsn, len(frames) + n, f) for n, (lsn, f) in enumerate(notes)]
            # a DDL row comes before the Relation frame its table sends next (same LSN: keep order)
            txn.schema_frames = tuple(f for _, _, f in sorted(frames, key=lambda x: (x[0], x[1])))

    def _catalog_notes(self, wanted: dict[int, list[tuple[StoredTransaction, int]]]) -> None:
        """After each Relation frame, its relation's missing values in the source catalog now."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.dsn, "pgfeed-capture")
            rows = self._conn.execute(_MISSING, (sorted(wanted),)).fetchall()
        except (psycopg.Error, SourceError) as exc:
            log.info("cannot read missing values from the source catalog (schema history goes "
                     "without them): %s", scrub(str(exc).strip(), self.dsn))
            self.close()
            return
        missing: dict[int, dict[str, str]] = {}
        for relid, name, text in rows:
            if text is not None:
                missing.setdefault(int(relid), {})[name] = text
        edits: dict[int, tuple[StoredTransaction, list[tuple[int, bytes]]]] = {}
        for relid, places in wanted.items():
            if relid not in missing:
                continue
            for txn, i in places:
                lsn = FRAME.unpack_from(txn.schema_frames[i])[0]
                note = annotation_frame(lsn, {"kind": "catalog", "relation_id": relid,
                                              "missing": missing[relid]})
                edits.setdefault(id(txn), (txn, []))[1].append((i, note))
        for txn, notes in edits.values():
            _insert_after(txn, notes)


def _insert_after(txn: StoredTransaction, notes: Sequence[tuple[int, bytes]]) -> None:
    """Put each note right after schema frame ``i`` of ``txn``."""
    after: dict[int, list[bytes]] = {}
    for i, note in notes:
        after.setdefault(i, []).append(note)
    frames: list[bytes] = []
    for i, frame in enumerate(txn.schema_frames):
        frames.append(frame)
        frames.extend(after.get(i, ()))
    txn.schema_frames = tuple(frames)
