"""Row changes straight from pgoutput bytes to JSON and protobuf bytes: the compiled fast twin.

The read path's cost is per column: decoding a value into a Python object (psycopg's loaders)
only for an encoder to turn it back into text. For the common types the text PostgreSQL sent is
already, or nearly, what the contract wants (an int8 is a JSON number as it stands, a numeric the
string, a timestamptz needs a ``T`` and ``:00``), so ``_transcode.c`` writes events from the text.

The replication session pins ``DateStyle=ISO``, ``TimeZone=UTC`` and ``extra_float_digits=3``
(``replication.session.SETTINGS``), which is what makes the text forms predictable.

The specification is the reference path: load the change (``RawChange.load``), then encode it
(``to_json``, ``to_proto``). The compiled encoder is its only twin: per relation version one
``Encoder`` built from the plan's per-column kinds (``RelationPlan.kinds``, from the type
registry), and anything outside its rules raises: a column type without a fast kind, a ``'u'``
(unchanged TOAST) or ``'b'`` (binary) column, a text outside its kind's shape (``infinity``, BC,
years past 9999), an odd layout. The caller then takes the reference path, so both give the same
events; ``tests/unit/encoding/test_transcode.py`` holds them to it. Without a C compiler (or with
``PGFEED_IMPL=reference``) every change takes the reference path; ``PGFEED_IMPL=c`` fails without
the module. docs/fast-paths.md has the measurements.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import orjson

from pgfeed.assembler.model import Op
from pgfeed.decoding.changes import RawChange
from pgfeed.decoding.plan import RelationPlan
from pgfeed.pgoutput.messages import TAG_DELETE, TAG_INSERT, TAG_UPDATE
from pgfeed.prototags import (
    CHANGE_KEY_ENTRY_KEY,
    CHANGE_KEY_ENTRY_VALUE,
    CHANGE_OP,
    CHANGE_SCHEMA,
    CHANGE_TABLE,
    DIGEST,
    OP_DELETE,
    OP_INSERT,
    OP_READ,
    OP_UPDATE,
)
from pgfeed.protowire import ld_field, table_version_field, varint
from pgfeed.types.registry import FAST_KINDS

__all__ = ["IMPLEMENTATION", "json_event", "json_writers", "proto_change", "proto_writers",
           "transcoded"]


def _load_compiled() -> Any:
    wanted = os.environ.get("PGFEED_IMPL", "")
    if wanted not in ("", "c", "reference"):
        raise ImportError(f"PGFEED_IMPL={wanted!r}: expected 'c' or 'reference'")
    if wanted == "reference":
        return None
    try:
        from pgfeed.encoding import _transcode
    except ImportError:
        if wanted == "c":
            raise
        return None
    return _transcode


_compiled = _load_compiled()
# which path writes row changes: "c" (service/pgfeed/encoding/_transcode.c where it can, the reference
# path for the rest) or "reference" (every change loaded, then encoded)
IMPLEMENTATION = "c" if _compiled is not None else "reference"

# The C encoder takes the kinds as one byte each, in the registry's order (its _kinds.h).
_KIND_CODES = {kind: code for code, kind in enumerate(FAST_KINDS)}
if _compiled is not None and getattr(_compiled, "KIND_NAMES", None) != FAST_KINDS:  # a stale build
    raise ImportError("service/pgfeed/encoding/_transcode.c knows other kinds than the type registry: "
                      "rebuild it (pip install -e .)")
if _compiled is not None and getattr(_compiled, "PROTO_TAGS", None) != DIGEST:  # a stale build
    raise ImportError("service/pgfeed/encoding/_transcode.c was built with other protobuf tags than "
                      "pgfeed/prototags.py: rebuild it (pip install -e .)")

_INSERT, _UPDATE, _DELETE = TAG_INSERT, TAG_UPDATE, TAG_DELETE
Writers = dict[int, Any]  # message tag -> write(data, lsn, seq, middle, tail) -> bytes
_NONE: Writers = {}
# per relation version: its compiled writers, JSON and protobuf (empty: no fast kind for a column)
_WRITERS: weakref.WeakKeyDictionary[RelationPlan, tuple[Writers, Writers]] = (
    weakref.WeakKeyDictionary())


def _json_float(t: bytes) -> bytes:
    return orjson.dumps(float(t))


def _json_text(t: bytes) -> bytes:
    return orjson.dumps(t.decode())


def _compile(plan: RelationPlan) -> tuple[Writers, Writers]:
    """The relation version's Encoder (both formats share one) as ``{tag: write}`` per format."""
    if plan.kinds is None:
        return _NONE, _NONE
    schema = plan.schema
    names = plan.column_names
    index = {n: i for i, n in enumerate(names)}
    # the relation version rides with the where part: one Encoder per version
    where_json = b',"schema":%s,"table":%s,"table_version":%d,' % (
        orjson.dumps(schema.schema), orjson.dumps(schema.table), schema.version)
    where = (ld_field(CHANGE_SCHEMA, schema.schema.encode())
             + ld_field(CHANGE_TABLE, schema.table.encode()) + table_version_field(schema.version))
    encoder = _compiled.Encoder(
        bytes(_KIND_CODES[k] for k in plan.kinds), tuple(index[k] for k in plan.key_names),
        tuple(CHANGE_KEY_ENTRY_KEY + varint(len(n.encode())) + n.encode() + CHANGE_KEY_ENTRY_VALUE
              for n in names),
        tuple(orjson.dumps(n) + b":" for n in names),
        tuple(_op_field(op) + where for op in (OP_INSERT, OP_UPDATE, OP_DELETE)),
        tuple(b'"op":"%s"%s' % (op, where_json) for op in (b"insert", b"update", b"delete")),
        _json_float, _json_text)
    tags = (_INSERT, _UPDATE, _DELETE)
    return dict.fromkeys(tags, encoder.json), dict.fromkeys(tags, encoder.proto)


def _op_field(number: int) -> bytes:
    """Change.op (a one-byte varint: Op's numbers are below 128)."""
    return CHANGE_OP + bytes((number,))


def _writers(plan: RelationPlan) -> tuple[Writers, Writers]:
    if IMPLEMENTATION != "c":
        return _NONE, _NONE
    found = _WRITERS.get(plan)
    if found is None:
        found = _WRITERS[plan] = _compile(plan)
    return found


def json_writers(plan: RelationPlan) -> Writers:
    """``{message tag: write(data, lsn, seq, middle, tail) -> event bytes}`` for one relation
    version (empty when a column has no fast kind, or without the C module); see ``json_event``."""
    return _writers(plan)[0]


def proto_writers(plan: RelationPlan) -> Writers:
    """``{message tag: write(data, lsn, seq, b"", b"") -> Change bytes}`` for one relation
    version (empty when a column has no fast kind, or without the C module); see ``proto_change``."""
    return _writers(plan)[1]


def transcoded(writers: Writers, change: RawChange, middle: bytes, tail: bytes) -> bytes | None:
    """``change`` written by ``writers`` (its relation version's ``json_writers`` or
    ``proto_writers``), or None when it needs the reference path (load, then encode)."""
    write = writers.get(change.tag)
    if write is None:
        return None
    try:  # try costs nothing until it raises; contextlib.suppress cost ~0.3 µs a change
        out: bytes = write(change.buf, change.lsn, change.seq, middle, tail)
    except Exception:  # noqa: BLE001 - any refusal: the reference path decides
        return None
    if change.op is _READ_OP:  # a backfill's Insert frame: the same event with op "read"
        return _as_read(out)
    return out


_READ_OP = Op.READ
_JSON_INSERT, _JSON_READ = b'"op":"insert"', b'"op":"read"'
_PROTO_INSERT, _PROTO_READ = _op_field(OP_INSERT), _op_field(OP_READ)


def _as_read(written: bytes) -> bytes | None:
    """An insert's event (JSON, or a protobuf Change, which writes its op field first) as the
    same row read by a backfill; None (reference path) for anything else."""
    if written[:2] == _PROTO_INSERT:
        return _PROTO_READ + written[2:]
    if _JSON_INSERT in written:
        return written.replace(_JSON_INSERT, _JSON_READ, 1)
    return None


def json_event(change: RawChange, middle: bytes, tail: bytes) -> bytes:
    """One change event as ``to_json.change_to_dict`` + ``dumps`` would write it (json values as
    PostgreSQL wrote them). ``middle`` is the transaction's ``"commit_lsn":…,"commit_ts":…,``
    part, ``tail`` its ``"unchanged_toast":[],"origin":…}``. Raises when the change needs the
    reference path."""
    return _or_raise(transcoded(json_writers(change.plan), change, middle, tail), change)


def proto_change(change: RawChange) -> bytes:
    """The serialized ``pgfeed.v1.Change`` that ``to_proto.change_bytes`` gives for the loaded
    change (json values as PostgreSQL wrote them). Raises when it needs the reference path."""
    return _or_raise(transcoded(proto_writers(change.plan), change, b"", b""), change)


def _or_raise(written: bytes | None, change: RawChange) -> bytes:
    if written is None:
        raise ValueError(f"{change.plan.name}: change {change.seq} needs the reference path (a "
                         "type, value or layout outside the fast path)")
    return written
