"""Row changes straight from pgoutput bytes to JSON and protobuf bytes: the compiled fast twin.

The read path's cost is per column: decoding a value into a Python object (psycopg's loaders)
only for an encoder to turn it back into text. For the common types the text PostgreSQL sent is
already, or nearly, what the contract wants (an int8 is a JSON number as it stands, a numeric the
string, a timestamptz needs a ``T`` and ``:00``), so ``_transcode.c`` writes events from the text.

The replication session pins ``DateStyle=ISO``, ``TimeZone=UTC`` and ``extra_float_digits=3``
(``replication.session.SETTINGS``), which is what makes the text forms predictable.

The specification is the reference path: load the change (``decoding.runs.RowRun.load``), then
encode it (``to_json``, ``to_proto``). The compiled encoder is its only twin: per relation version
one ``Encoder`` built from the plan's per-column kinds (``RelationPlan.kinds``, from the type
registry), and anything outside its rules raises: a column type without a fast kind, a ``'u'``
(unchanged TOAST) or ``'b'`` (binary) column, a text outside its kind's shape (``infinity``, BC,
years past 9999), an odd layout. It writes a whole run of a transaction's row frames in one call
(``run_bodies``) and stops before a change it refuses; that change takes the reference path, so both give the same
events; ``tests/unit/encoding/test_transcode.py`` holds them to it. Without a C compiler (or with
``PGFEED_IMPL=reference``) every change takes the reference path; ``PGFEED_IMPL=c`` fails without
the module. docs/fast-paths.md has the measurements.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any

import orjson

from pgfeed.decoding.model import Change
from pgfeed.decoding.plan import RelationPlan
from pgfeed.decoding.runs import RowRun
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

__all__ = ["IMPLEMENTATION", "encoder", "run_bodies"]


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

# per relation version: its compiled Encoder, for live rows and for a backfill's (op "read"); None
# when a column has no fast kind
_ENCODERS: weakref.WeakKeyDictionary[RelationPlan, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _json_float(t: bytes) -> bytes:
    return orjson.dumps(float(t))


def _json_text(t: bytes) -> bytes:
    return orjson.dumps(t.decode())


def _compile(plan: RelationPlan, read: bool) -> Any:
    """The relation version's Encoder (both formats share one); ``read``: Insert frames are a
    backfill's rows, op "read"."""
    if plan.kinds is None:
        return None
    schema = plan.schema
    names = plan.column_names
    index = {n: i for i, n in enumerate(names)}
    # the relation version rides with the where part: one Encoder per version
    where_json = b',"schema":%s,"table":%s,"table_version":%d,' % (
        orjson.dumps(schema.schema), orjson.dumps(schema.table), schema.version)
    where = (ld_field(CHANGE_SCHEMA, schema.schema.encode())
             + ld_field(CHANGE_TABLE, schema.table.encode()) + table_version_field(schema.version))
    first, first_op = (OP_READ, b"read") if read else (OP_INSERT, b"insert")
    return _compiled.Encoder(
        bytes(_KIND_CODES[k] for k in plan.kinds), tuple(index[k] for k in plan.key_names),
        tuple(CHANGE_KEY_ENTRY_KEY + varint(len(n.encode())) + n.encode() + CHANGE_KEY_ENTRY_VALUE
              for n in names),
        tuple(orjson.dumps(n) + b":" for n in names),
        tuple(_op_field(op) + where for op in (first, OP_UPDATE, OP_DELETE)),
        tuple(b'"op":"%s"%s' % (op, where_json) for op in (first_op, b"update", b"delete")),
        _json_float, _json_text)


def _op_field(number: int) -> bytes:
    """Change.op (a one-byte varint: Op's numbers are below 128)."""
    return CHANGE_OP + bytes((number,))


def encoder(plan: RelationPlan, read: bool = False) -> Any:
    """The compiled ``Encoder`` of a relation version (``read``: of a backfill's rows), or None
    (a column without a fast kind, or no C module)."""
    if IMPLEMENTATION != "c":
        return None
    found = _ENCODERS.get(plan)
    if found is None:
        found = _ENCODERS[plan] = (_compile(plan, False), _compile(plan, True))
    return found[1 if read else 0]


def run_bodies(run: RowRun, json: bool, middle: bytes, tail: bytes,
               reference: Callable[[Change], bytes]) -> list[bytes]:
    """Every change of ``run`` written: JSON events (``json``; ``middle`` is the transaction's
    ``"commit_lsn":…,"commit_ts":…,`` part, ``tail`` its ``"unchanged_toast":[],"origin":…}``)
    or serialized ``pgfeed.v1.Change``s. The compiled encoder writes the run in one call, up to
    a change it refuses; ``reference`` writes that one loaded, and the encoder goes on after it."""
    write = encoder(run.plan, run.read)
    if write is None:
        return [reference(c) for c in run.load()]
    out: list[bytes] = []
    pos, seq, left, payload = run.start, run.first_seq, run.count, run.payload
    while True:
        written, pos = write.run(payload, pos, left, seq, json, middle, tail)
        out += written
        n = len(written)
        left -= n
        if not left:
            return out
        seq += n
        change, pos = run.load_at(pos, seq)
        out.append(reference(change))
        left -= 1
        if not left:
            return out
        seq += 1
