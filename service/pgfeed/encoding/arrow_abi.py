"""The interface between ``arrow_rows.py`` and the compiled ``ArrowRows`` (``_transcode_arrow.c``),
defined once: Arrow column kinds, a column's spec, the metadata columns it writes after a table's,
the slots of ``buffers()`` and the buffers of each, the ops a row is written with and ``scan()``'s
flags.

``python -m pgfeed.encoding.tables`` writes ``_arrow_abi.h`` from this module;
``tests/unit/encoding/test_tables.py`` fails when the header is stale, and ``arrow_rows.py`` leaves
the compiled rows out when the built module carries another ``DIGEST`` (a stale build). Pure
constants: no pyarrow here, so the header's generator and the tests import it cheaply.
"""

from __future__ import annotations

import hashlib
from enum import IntEnum, IntFlag
from typing import NamedTuple

__all__ = ["DIGEST", "META_COLUMNS", "META_KINDS", "ROW_OPS", "ArrowKind", "ColumnBuffer",
           "ColumnSpec", "Meta", "ScanFlag", "Slot", "definition"]


class ArrowKind(IntEnum):
    """A column's Arrow type as ArrowRows writes it: a column spec's first item (and a list's
    last, its elements' kind). C: ``A_<NAME>``."""

    INT16 = 0
    INT32 = 1
    INT64 = 2
    FLOAT32 = 3
    FLOAT64 = 4
    BOOL = 5
    DECIMAL = 6
    DATE32 = 7
    TIMESTAMP = 8
    STRING = 9
    BINARY = 10
    LIST = 11


class ColumnSpec(NamedTuple):
    """One table column as ``ArrowRows(columns, ...)`` takes it. C: parsed in this order,
    ``SPEC_<FIELD>``."""

    kind: int  # an ArrowKind
    precision: int  # a decimal's (a list's: its elements')
    scale: int
    element: int  # a list's elements' ArrowKind, else 0


class ColumnBuffer(IntEnum):
    """The items of one column's entry in ``buffers()``. C: ``B_<NAME>``."""

    VALID = 0  # the validity bitmap, None when no value is null
    VALUES = 1  # fixed-width values, a bool bitmap, or int32 offsets (string, binary, list)
    DATA = 2  # string and binary bytes, else None
    NULLS = 3  # the null count


class Meta(IntEnum):
    """The metadata columns ArrowRows appends after the table's columns and key fields, in
    order: the typed schema's metadata (``pgfeed_client.pgtypes.METADATA_COLUMN_TYPES``) and the
    key struct's validity. C: ``M_<NAME>``."""

    OP = 0
    LSN = 1
    SEQ = 2
    COMMIT_LSN = 3
    COMMIT_TS = 4
    XID = 5
    TOAST_NAME = 6  # the _unchanged_toast lists' elements
    KEY_VALID = 7
    TABLE_VERSION = 8


# How each metadata column is written (C: META_KINDS[M_COUNT]).
META_KINDS: dict[Meta, ArrowKind] = {
    Meta.OP: ArrowKind.STRING, Meta.LSN: ArrowKind.INT64, Meta.SEQ: ArrowKind.INT64,
    Meta.COMMIT_LSN: ArrowKind.INT64, Meta.COMMIT_TS: ArrowKind.INT64, Meta.XID: ArrowKind.INT64,
    Meta.TOAST_NAME: ArrowKind.STRING, Meta.KEY_VALID: ArrowKind.BOOL,
    Meta.TABLE_VERSION: ArrowKind.INT32,
}


class Slot(IntEnum):
    """``buffers()``'s entries after the table columns and key fields: one for each metadata
    column, in ``Meta`` order, with the ``_unchanged_toast`` lists' offsets just before their
    names (``TOAST_OFFSETS``); the list columns' elements follow ``len(Slot)`` entries on. C: the
    order ``ArrowRows_buffers`` appends in (``S_<NAME>``, checked by static asserts)."""

    OP = 0
    LSN = 1
    SEQ = 2
    COMMIT_LSN = 3
    COMMIT_TS = 4
    XID = 5
    TOAST_OFFSETS = 6
    TOAST_NAME = 7
    KEY_VALID = 8
    TABLE_VERSION = 9


# The typed schema's metadata columns (pgtypes.METADATA_COLUMN_TYPES) -> the slot of their
# buffers; ``_unchanged_toast`` is a list: its offsets at TOAST_OFFSETS, its names at TOAST_NAME.
META_COLUMNS: dict[str, Slot] = {
    "_op": Slot.OP, "_lsn": Slot.LSN, "_seq": Slot.SEQ, "_commit_lsn": Slot.COMMIT_LSN,
    "_commit_ts": Slot.COMMIT_TS, "_xid": Slot.XID, "_unchanged_toast": Slot.TOAST_NAME,
    "_table_version": Slot.TABLE_VERSION,
}

# The ``_op`` a row is written with, by the op index scan() works with (C: ROW_<OP> and
# OP_NAMES).
ROW_OPS = ("insert", "update", "delete", "read")


class ScanFlag(IntFlag):
    """``scan()``'s ``flags``. C: ``F_<NAME>``; ``F_WANT(op)`` is ``F_WANT_INSERT << op``."""

    READ = 1  # a backfill chunk: its inserts are rows read, op "read"
    ALLOW_U = 2  # unchanged TOAST values are null and listed (not toast=reselect)
    WANT_INSERT = 4
    WANT_UPDATE = 8
    WANT_DELETE = 16
    WANT_READ = 32


def definition() -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    """Every table above as (name, ((member, value), ...)): what the header and DIGEST are of."""
    return (
        ("A", tuple((k.name, k.value) for k in ArrowKind)),
        ("SPEC", tuple((name.upper(), i) for i, name in enumerate(ColumnSpec._fields))),
        ("B", tuple((b.name, b.value) for b in ColumnBuffer)),
        ("M", tuple((m.name, m.value) for m in Meta)),
        ("META_KINDS", tuple((m.name, META_KINDS[m].value) for m in Meta)),
        ("S", tuple((s.name, s.value) for s in Slot)),
        ("OP_NAMES", tuple((name, i) for i, name in enumerate(ROW_OPS))),
        ("F", tuple((f.name or "", f.value) for f in ScanFlag)),
    )


DIGEST = hashlib.sha1(repr(definition()).encode()).hexdigest()[:16]
