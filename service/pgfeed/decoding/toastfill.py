"""The ``toast=reselect`` fill rule: what an unchanged TOAST column of the change at position P is.

Pure and stateless apart from the ``ImageStore`` it is given; ``feeds.toastindex`` applies it to
a feed's log once, in log order, and keeps the answers. The rule (docs/design.md "Unchanged
TOAST"): the value of column c of the change at P is

1. the change's own old image, when it carries c ('O', REPLICA IDENTITY FULL; key columns of a
   'K' image), else
2. c in the newest image of the same row (relation, replica-identity key) at a position before P,
   when its type is the column's type now and it is not NULL, else
3. unknown: the column stays unfilled.

Images are the rows the log shows, in log order: an insert's or update's new row (with its
unchanged columns filled by this same rule), keyed by its key. An update that changes the key
moves the image; a delete, or a truncate of the table, ends it. A row whose key cannot be read
(a key column itself unchanged TOAST, no old part) ends every image of its table, so a later
fill is never taken from an image the log might have outdated.

Each held value remembers the position whose wire bytes carried it (``Held``), so an index can
store one copy of a large value however many changes are filled from it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Protocol

from pgfeed.decoding.relations import RelationSchema
from pgfeed.pgoutput.messages import TUPLE_OLD as _OLD_ROW
from pgfeed.pgoutput.messages import (
    UNCHANGED_TOAST,
    DeleteMessage,
    InsertMessage,
    UpdateMessage,
)

__all__ = ["Held", "Image", "ImageStore", "MemoryImages", "Position", "apply_relation",
           "apply_row", "apply_truncate", "row_ident"]

Position = tuple[int, int]  # (commit_lsn, seq) of a change
Held = tuple[int, str | None, int, int]  # value oid, text (None: NULL), source commit_lsn, seq
Image = dict[str, Held]  # column name -> what the row held there



class ImageStore(Protocol):
    """The newest image of each row the log has shown so far."""

    def get(self, relation_id: int, ident: bytes) -> Image | None: ...

    def put(self, relation_id: int, ident: bytes, image: Image) -> None: ...

    def drop(self, relation_id: int, ident: bytes) -> None: ...

    def drop_relations(self, relation_ids: Iterable[int]) -> None: ...


class MemoryImages:
    """An ``ImageStore`` in a dict (tests, and the batch cache of the durable one)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, bytes], Image] = {}

    def get(self, relation_id: int, ident: bytes) -> Image | None:
        return self.rows.get((relation_id, ident))

    def put(self, relation_id: int, ident: bytes, image: Image) -> None:
        self.rows[(relation_id, ident)] = image

    def drop(self, relation_id: int, ident: bytes) -> None:
        self.rows.pop((relation_id, ident), None)

    def drop_relations(self, relation_ids: Iterable[int]) -> None:
        gone = set(relation_ids)
        for k in [k for k in self.rows if k[0] in gone]:
            del self.rows[k]


def row_ident(texts: Sequence[str | None]) -> bytes:
    """A row's identity from its key columns' text: the texts length-prefixed, or their SHA-256
    when that is longer than 32 bytes (FULL keys are whole rows). Stored in the fill index: keep
    it stable."""
    raw = b"".join(b"\xff\xff\xff\xff" if t is None else len(b := t.encode()).to_bytes(4, "big") + b
                   for t in texts)
    return b"r" + raw if len(raw) <= 32 else b"h" + hashlib.sha256(raw).digest()


def _key_texts(values: Sequence[object], key_idx: Sequence[int]) -> list[str | None] | None:
    out: list[str | None] = []
    for i in key_idx:
        v = values[i] if i < len(values) else UNCHANGED_TOAST
        if v is not None and not isinstance(v, str):  # unchanged TOAST or binary: unreadable
            return None
        out.append(v)
    return out


def apply_row(images: ImageStore, position: Position,
              msg: InsertMessage | UpdateMessage | DeleteMessage,
              schema: RelationSchema) -> dict[str, Held]:
    """Apply the change at ``position`` to ``images``; return the fills of its unchanged TOAST
    columns (only those the rule can fill). ``schema`` is the relation version in force."""
    rel = schema.relation_id
    key_idx = [i for i, c in enumerate(schema.columns) if c.is_key]
    old = None if isinstance(msg, InsertMessage) or msg.old_tuple is None else msg.old_tuple.values
    full_old = old is not None and msg.old_kind == _OLD_ROW  # type: ignore[union-attr]
    prior_ident: bytes | None = None
    if not isinstance(msg, InsertMessage):
        texts = _key_texts(old if old is not None else msg.new_tuple.values, key_idx)  # type: ignore[union-attr]
        if texts is None:  # which row this is cannot be told: trust no image of its table
            images.drop_relations((rel,))
        elif key_idx:
            prior_ident = row_ident(texts)
    if isinstance(msg, DeleteMessage):
        if prior_ident is not None:
            images.drop(rel, prior_ident)
        return {}
    prior = images.get(rel, prior_ident) if prior_ident is not None else None
    new = msg.new_tuple.values
    key_set = set(key_idx)
    image: Image = {}
    fills: dict[str, Held] = {}
    for i, col in enumerate(schema.columns):
        v = new[i] if i < len(new) else None
        if v is UNCHANGED_TOAST:
            held: Held | None = None
            was = old[i] if old is not None and (full_old or i in key_set) and i < len(old) else None
            if isinstance(was, str):
                held = (col.value_oid, was, position[0], position[1])
            elif prior is not None:
                got = prior.get(col.name)
                if got is not None and got[0] == col.value_oid and got[1] is not None:
                    held = got
            if held is not None:
                fills[col.name] = held
                image[col.name] = held
        elif v is None or isinstance(v, str):
            image[col.name] = (col.value_oid, v, position[0], position[1])
        # binary ('b') values are not kept: pgfeed asks for text
    if not key_idx:  # no replica identity: rows of this table are never told apart
        return fills
    if prior_ident is not None:
        images.drop(rel, prior_ident)
    names = [schema.columns[i].name for i in key_idx]
    if all(n in image for n in names):
        images.put(rel, row_ident([image[n][1] for n in names]), image)
    else:  # the new row cannot be told apart from others: trust no image of its table
        images.drop_relations((rel,))
    return fills


def apply_relation(images: ImageStore, previous: RelationSchema | None,
                   current: RelationSchema) -> None:
    """A new version of a relation whose replica identity names other columns ends its images
    (they were keyed by the old identity: switching back must not find them stale)."""
    if previous is not None and previous.key_columns != current.key_columns:
        images.drop_relations((current.relation_id,))


def apply_truncate(images: ImageStore, relation_ids: Iterable[int]) -> None:
    """A truncate ends every image of the tables it names."""
    images.drop_relations(relation_ids)
