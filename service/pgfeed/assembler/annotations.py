"""Schema annotations: what pgoutput's Relation messages do not say about a new relation version,
kept in the change log's schema history beside the Relation frames (never trimmed, so a restart
and every replica answer the same).

An annotation is a frame of the schema history whose message starts with ``ANNOTATION_TAG`` (a
byte no pgoutput message starts with) followed by a JSON object. It lives only in
``StoredTransaction.schema_frames``, never in a payload, so readers of payloads never meet it.
Capture writes two kinds (``service/pgfeed/replication/schemanotes.py``):

- ``catalog``: right after a Relation frame, the source catalog's missing values
  (``pg_attribute.attmissingval``) of that relation's columns, read when capture received the
  Relation (``{"kind": "catalog", "relation_id": R, "missing": {"col": "text", ...}}``).
- ``ddl``: at the position of a captured DDL command (feed option ``ddl: "capture"``), the
  table's columns after it with their ``attnum`` and, relative to the table's previous capture,
  ``previous_name`` (a rename) and ``added``, and its missing values
  (``{"kind": "ddl", "relation_id": R, "columns": [{"attnum", "name", "previous_name"?,
  "added"?, "missing"?}, ...]}``).

``RelationCatalog`` turns them into ``ColumnNote``\\ s of the version they describe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from pgfeed.assembler.framing import FRAME

__all__ = ["ANNOTATION_TAG", "ColumnNote", "annotation_body", "annotation_frame", "ddl_notes"]

ANNOTATION_TAG = 0xA7  # pgoutput's tags are ASCII letters


@dataclass(frozen=True, slots=True)
class ColumnNote:
    """What a relation version knows of one of its columns beyond the Relation message."""

    name: str
    previous_name: str | None = None  # its name in the previous version (a rename)
    missing: str | None = None  # text of PostgreSQL's attmissingval (None: it holds none)


def annotation_frame(lsn: int, body: Mapping[str, Any]) -> bytes:
    """A schema-history frame holding ``body``."""
    message = bytes((ANNOTATION_TAG,)) + orjson.dumps(body)
    return FRAME.pack(lsn, len(message)) + message


def annotation_body(frame: bytes | memoryview) -> dict[str, Any] | None:
    """The JSON object of an annotation frame (framed or bare), None for any other frame."""
    buf = bytes(frame)
    if len(buf) > FRAME.size and FRAME.unpack_from(buf)[1] == len(buf) - FRAME.size:
        buf = buf[FRAME.size:]
    if not buf or buf[0] != ANNOTATION_TAG:
        return None
    body = orjson.loads(buf[1:])
    return body if isinstance(body, dict) else None


def ddl_notes(pending: Sequence[Mapping[str, Any]], names: Sequence[str],
              previous: Sequence[str] | None) -> dict[str, ColumnNote]:
    """The notes of a new version with columns ``names`` from the DDL captured since the previous
    version (columns ``previous``; None: there is none), oldest first.

    A column's attnum is its name's in the newest capture. Its previous name is the name its
    attnum had before the first capture that renamed it, when the previous version had a column
    of that name and the attnum was not added meanwhile (a column added and renamed since is
    new). A column added since (by attnum, or absent from the previous version without a rename)
    takes the missing value of the newest capture."""
    if not pending:
        return {}
    first_name: dict[int, str] = {}
    added: set[int] = set()
    for ddl in pending:
        for col in ddl.get("columns") or ():
            attnum = int(col["attnum"])
            if col.get("added") and attnum not in first_name:
                added.add(attnum)
            old = col.get("previous_name")
            if old and attnum not in first_name and attnum not in added:
                first_name[attnum] = old
    newest = {str(c["name"]): c for c in pending[-1].get("columns") or ()}
    before = set(previous or ())
    notes: dict[str, ColumnNote] = {}
    for name in names:
        col = newest.get(name)
        if col is None:
            continue
        attnum = int(col["attnum"])
        old = first_name.get(attnum)
        renamed = old if old is not None and old != name and old in before else None
        is_new = previous is not None and (attnum in added or (name not in before and renamed is None))
        missing = col.get("missing") if is_new else None
        if renamed is not None or missing is not None:
            notes[name] = ColumnNote(name, renamed, missing)
    return notes
