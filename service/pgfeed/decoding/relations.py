"""Relation schemas by version: Relation ('R') and Type ('Y') messages from a feed's schema history.

``RelationCatalog.at(relation_id, before_lsn)`` is the schema a transaction committed at
``before_lsn`` starts with; Relation frames inside its own payload then apply as they come.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pgfeed.assembler.annotations import ColumnNote, annotation_body, ddl_notes
from pgfeed.assembler.framing import FRAME
from pgfeed.errors import SchemaError
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import RelationMessage, TypeMessage
from pgfeed_client._cursor import format_lsn
from pgfeed_client.pgtypes import (
    BUILTIN_TYPES,
    FIRST_NON_BUILTIN_OID,
    TEXT_ARRAY_OID,
    TEXT_OID,
    builtin_oid,
)

__all__ = [
    "ColumnNote",
    "ColumnSchema",
    "RelationCatalog",
    "RelationSchema",
    "TypeName",
    "format_type",
    "resolve_value_oid",
    "schema_message",
    "served_schema",
]

# (value_oid, text) -> the value as a JSON event holds it (``decoding.values.load_value``)
Loader = Callable[[int, str], Any]

_IDENTITY_NAMES = {ord("d"): "default", ord("n"): "nothing", ord("f"): "full", ord("i"): "index"}


@dataclass(frozen=True, slots=True)
class TypeName:
    """What a Type message says about a non-built-in type OID.

    For a domain, pgoutput sends the domain's OID with its *base* type's namespace and name, so
    a domain over int4 reads as ``('', 'int4')`` and follows int4.
    """

    namespace: str  # '' means pg_catalog
    name: str

    @property
    def qualified(self) -> str:
        return self.name if self.namespace in ("", "pg_catalog") else f"{self.namespace}.{self.name}"


def resolve_value_oid(type_oid: int, type_name: TypeName | None) -> int:
    """The built-in type whose text form a column's values take.

    A built-in OID is itself; a domain over a built-in type is its base type; an array of a
    non-built-in type is ``text[]`` (elements keep their text form); anything else (enums,
    composites, extension types, OIDs no Type message named) is ``text``.
    """
    if type_oid < FIRST_NON_BUILTIN_OID:
        return type_oid if type_oid in BUILTIN_TYPES else TEXT_OID
    if type_name is None:
        return TEXT_OID
    if type_name.namespace in ("", "pg_catalog"):
        base = builtin_oid(type_name.name)
        if base is not None:
            return base
    return TEXT_ARRAY_OID if type_name.name.startswith("_") else TEXT_OID


# format_type's SQL spellings of built-in type names (src/backend/utils/adt/format_type.c)
_SQL_NAMES = {
    "bool": "boolean", "int2": "smallint", "int4": "integer", "int8": "bigint", "float4": "real",
    "float8": "double precision", "char": '"char"', "bpchar": "character",
    "varchar": "character varying", "bit": "bit", "varbit": "bit varying", "numeric": "numeric",
    "time": "time", "timetz": "time", "timestamp": "timestamp", "timestamptz": "timestamp",
    "interval": "interval",
}
_ZONE = {"time": " without time zone", "timetz": " with time zone",
         "timestamp": " without time zone", "timestamptz": " with time zone"}
# interval typmod: range mask (bits 16-30) -> fields, as PostgreSQL's intervaltypmodout
_Y, _MO, _D, _H, _MI, _S = 1 << 2, 1 << 1, 1 << 3, 1 << 10, 1 << 11, 1 << 12
_INTERVAL_FIELDS = {
    _Y: " year", _MO: " month", _D: " day", _H: " hour", _MI: " minute", _S: " second",
    _Y | _MO: " year to month", _D | _H: " day to hour", _D | _H | _MI: " day to minute",
    _D | _H | _MI | _S: " day to second", _H | _MI: " hour to minute",
    _H | _MI | _S: " hour to second", _MI | _S: " minute to second", 0x7FFF: "",
}


def _modifier(name: str, typmod: int) -> str:
    """The ``(…)`` part format_type writes for a built-in type's typmod ('' for none)."""
    if typmod < 0:
        return ""
    if name in ("bpchar", "varchar"):
        return f"({typmod - 4})"
    if name in ("bit", "varbit"):
        return f"({typmod})"
    if name == "numeric":
        if typmod < 4:
            return ""
        packed = typmod - 4
        return f"({(packed >> 16) & 0xFFFF},{((packed & 0x7FF) ^ 1024) - 1024})"
    if name in _ZONE:
        return f"({typmod})"
    if name == "interval":
        fields = _INTERVAL_FIELDS.get((typmod >> 16) & 0x7FFF, "")
        precision = typmod & 0xFFFF
        return fields + (f"({precision})" if precision != 0xFFFF else "")
    return ""


def format_type(type_oid: int, typmod: int, type_name: str | None = None) -> str | None:
    """A column's type as PostgreSQL's ``format_type(oid, typmod)`` writes it for a built-in
    type: ``numeric(12,2)``, ``character varying(40)``, ``timestamp(3) with time zone``,
    ``integer[]``; for any other type ``type_name`` (the name its Type message gave, without
    modifiers: pgoutput sends no more), None when it has none."""
    name = BUILTIN_TYPES.get(type_oid) if type_oid < FIRST_NON_BUILTIN_OID else None
    if name is None:
        return type_name
    array = name.startswith("_")
    base = name[1:] if array else name
    if base == "bpchar" and typmod < 0:
        text = "bpchar"  # unconstrained: not character, which means character(1)
    else:
        sql = _SQL_NAMES.get(base, base)
        mod = _modifier(base, typmod)
        text = sql + mod + _ZONE.get(base, "") if base in _ZONE else sql + mod
    return text + "[]" if array else text


@dataclass(frozen=True, slots=True)
class ColumnSchema:
    name: str
    type_oid: int
    typmod: int
    is_key: bool  # part of the replica identity (every column under REPLICA IDENTITY FULL)
    type_name: str | None  # pg_catalog names bare, others schema-qualified; None if never named
    value_oid: int  # the built-in type whose text form the values take (see resolve_value_oid)

    @property
    def type(self) -> str | None:
        """The type with its modifiers, as PostgreSQL's format_type writes it (``numeric(12,2)``)."""
        return format_type(self.type_oid, self.typmod, self.type_name)


def served_schema(namespace: str) -> str:
    """A Relation message's namespace as served and filtered on: the protocol's '' is pg_catalog."""
    return namespace or "pg_catalog"


@dataclass(frozen=True, slots=True, eq=False)
class RelationSchema:
    """One version of a relation's shape. Identity-hashed: decoders cache plans per object."""

    relation_id: int
    schema: str  # '' from the wire is reported as 'pg_catalog'
    table: str
    replica_identity: str  # 'default', 'nothing', 'full' or 'index'
    columns: tuple[ColumnSchema, ...]
    version: int  # 1, 2, ... per relation_id, in commit order
    valid_from: int  # commit_lsn of the transaction that sent it (0: unknown)
    # What the schema history's annotations say of its columns (renames, missing values), and
    # the table's qualified name in the previous version when it differs (a table rename).
    notes: tuple[ColumnNote, ...] = ()
    previous_table: str | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.is_key)

    def same_shape(self, other: RelationSchema) -> bool:
        """Equal in everything but version and valid_from (a re-sent, unchanged Relation)."""
        return (self.relation_id, self.schema, self.table, self.replica_identity, self.columns) == (
            other.relation_id, other.schema, other.table, other.replica_identity, other.columns)

    def describe(self, load: Loader | None = None) -> dict[str, Any]:
        """This version as ``/tables`` and ``/schema`` serve it. A column carries
        ``previous_name`` (renamed since the previous version) and ``missing_value`` (added with a
        default PostgreSQL keeps as its missing value: ``load(value_oid, text)`` gives the value as
        a JSON event's image holds it; without ``load``, the text) only when known."""
        notes = {n.name: n for n in self.notes}
        columns = []
        for c in self.columns:
            col: dict[str, Any] = {"name": c.name, "type_oid": c.type_oid, "type_name": c.type_name,
                                   "type": c.type, "typmod": c.typmod, "key": c.is_key}
            note = notes.get(c.name)
            if note is not None:
                if note.previous_name is not None:
                    col["previous_name"] = note.previous_name
                if note.missing is not None:
                    col["missing_value"] = load(c.value_oid, note.missing) if load else note.missing
            columns.append(col)
        out: dict[str, Any] = {"version": self.version, "valid_from": format_lsn(self.valid_from),
                               "replica_identity": self.replica_identity, "columns": columns}
        if self.previous_table is not None:
            out["previous_name"] = self.previous_table
        return out

    def schema_at(self, load: Loader | None = None) -> dict[str, Any]:
        """``GET …/tables/{table}/schema``: this version's columns with their types as
        format_type writes them, its key columns, and where it took effect."""
        return {"relation_id": self.relation_id, "schema": self.schema, "table": self.table,
                "name": self.qualified_name, **self.describe(load),
                "key_columns": list(self.key_columns)}


def schema_message(frame_or_message: bytes | memoryview | RelationMessage | TypeMessage,
                   ) -> RelationMessage | TypeMessage:
    """A Relation/Type message from a decoded message, raw message bytes or a FRAME-prefixed frame."""
    if isinstance(frame_or_message, (RelationMessage, TypeMessage)):
        return frame_or_message
    buf = bytes(frame_or_message)
    if len(buf) > FRAME.size and FRAME.unpack_from(buf)[1] == len(buf) - FRAME.size:
        buf = buf[FRAME.size:]
    msg = decode(buf)
    if not isinstance(msg, (RelationMessage, TypeMessage)):
        raise SchemaError(f"schema history holds a {type(msg).__name__}, not a Relation or Type")
    return msg


class RelationCatalog:
    """Relation versions and type names of one feed, built from its schema history.

    ``add`` may be called with frames in any order; versions are kept sorted by ``valid_from``
    and a Relation equal to the version in force is not a new version.
    """

    def __init__(self) -> None:
        self._versions: dict[int, list[RelationSchema]] = {}
        self._starts: dict[int, list[int]] = {}  # valid_from of each version, for bisect
        self._types: dict[int, TypeName] = {}
        # captured DDL (``ddl`` annotations) since the relation's newest version, oldest first
        self._pending_ddl: dict[int, list[dict[str, Any]]] = {}

    def add(self, commit_lsn: int,
            frame_or_message: bytes | memoryview | RelationMessage | TypeMessage) -> RelationSchema | None:
        """Record a Relation or Type message (or an annotation, ``assembler.annotations``) of the
        transaction committed at ``commit_lsn``.

        Returns the version in force after it (None for a Type message or an annotation).
        """
        if not isinstance(frame_or_message, (RelationMessage, TypeMessage)):
            body = annotation_body(frame_or_message)
            if body is not None:
                self._annotate(commit_lsn, body)
                return None
        msg = schema_message(frame_or_message)
        if isinstance(msg, TypeMessage):
            self._types[msg.type_oid] = TypeName(msg.namespace, msg.name)
            return None
        return self._add_relation(commit_lsn, self.build(msg, commit_lsn))

    def build(self, msg: RelationMessage, valid_from: int,
              types: dict[int, TypeName] | None = None) -> RelationSchema:
        """A RelationSchema (version 0, not recorded) from a Relation message; ``types`` overlays
        the catalog's type names (Type messages seen in the same transaction)."""
        def type_of(oid: int) -> TypeName | None:
            found = types.get(oid) if types else None
            return found if found is not None else self._types.get(oid)

        columns = []
        for col in msg.columns:
            tname = type_of(col.type_oid)
            if col.type_oid < FIRST_NON_BUILTIN_OID:
                display = BUILTIN_TYPES.get(col.type_oid)
            else:
                display = tname.qualified if tname is not None else None
            columns.append(ColumnSchema(col.name, col.type_oid, col.type_modifier, col.is_key,
                                        display, resolve_value_oid(col.type_oid, tname)))
        identity = _IDENTITY_NAMES.get(msg.replica_identity, chr(msg.replica_identity))
        return RelationSchema(msg.relation_id, served_schema(msg.namespace), msg.relation_name,
                              identity, tuple(columns), 0, valid_from)

    def _add_relation(self, commit_lsn: int, schema: RelationSchema) -> RelationSchema:
        versions = self._versions.setdefault(schema.relation_id, [])
        starts = self._starts.setdefault(schema.relation_id, [])
        i = bisect.bisect_right(starts, commit_lsn)
        if i and versions[i - 1].same_shape(schema):
            return versions[i - 1]
        previous = versions[i - 1] if i else None
        pending = self._pending_ddl.pop(schema.relation_id, [])
        notes = ddl_notes(pending, schema.column_names,
                          previous.column_names if previous is not None else None)
        schema = replace(schema, notes=tuple(notes.values()), previous_table=(
            previous.qualified_name if previous is not None
            and previous.qualified_name != schema.qualified_name else None))
        versions.insert(i, schema)
        starts.insert(i, commit_lsn)
        for n in range(i, len(versions)):  # renumber from the insertion point (usually just one)
            versions[n] = replace(versions[n], version=n + 1)
        return versions[i]

    def _annotate(self, commit_lsn: int, body: dict[str, Any]) -> None:
        """Apply an annotation: a ``ddl`` one waits for the relation's next version; a
        ``catalog`` one gives missing values to the columns the version its transaction
        introduced added (absent from the previous version and not renamed)."""
        relation_id = int(body.get("relation_id", 0))
        if body.get("kind") == "ddl":
            self._pending_ddl.setdefault(relation_id, []).append(body)
            return
        if body.get("kind") != "catalog":
            return  # a kind this version does not know: written by a newer pgfeed
        versions = self._versions.get(relation_id)
        if not versions:
            return
        i = bisect.bisect_right(self._starts[relation_id], commit_lsn) - 1
        if i < 0 or versions[i].valid_from != commit_lsn:
            return  # the Relation it follows repeated the version in force
        current = versions[i]
        before = set(versions[i - 1].column_names) if i else None
        if before is None:
            return
        notes = {n.name: n for n in current.notes}
        missing: dict[str, str] = body.get("missing") or {}
        for name in current.column_names:
            note = notes.get(name)
            if name in before or name not in missing or (note is not None and (
                    note.previous_name is not None or note.missing is not None)):
                continue
            notes[name] = ColumnNote(name, None, str(missing[name]))
        versions[i] = replace(current, notes=tuple(notes.values()))

    def find(self, relation_id: int, before_lsn: int) -> RelationSchema | None:
        """The latest version from transactions with commit_lsn < before_lsn, or None."""
        starts = self._starts.get(relation_id)
        if not starts:
            return None
        i = bisect.bisect_left(starts, before_lsn)
        return self._versions[relation_id][i - 1] if i else None

    def at(self, relation_id: int, before_lsn: int) -> RelationSchema:
        """Like ``find`` but raises SchemaError for a relation not known by then."""
        schema = self.find(relation_id, before_lsn)
        if schema is None:
            raise SchemaError(f"relation id {relation_id} has no schema before LSN "
                              f"{format_lsn(before_lsn)}")
        return schema

    def versions(self, relation_id: int) -> list[RelationSchema]:
        return list(self._versions.get(relation_id, ()))

    def relations(self) -> list[tuple[int, list[RelationSchema]]]:
        """Every relation id seen with its versions, oldest first."""
        return [(r, list(v)) for r, v in sorted(self._versions.items())]

    def type_name(self, type_oid: int) -> TypeName | None:
        return self._types.get(type_oid)

    def newest(self, name: str) -> RelationSchema | None:
        """The newest shape of table ``name`` (``schema.table``): of the relations whose
        current version has that name, the one that took effect last (a typed read's shape)."""
        found: RelationSchema | None = None
        for versions in self._versions.values():
            latest = versions[-1]
            if latest.qualified_name == name and (found is None
                                                  or latest.valid_from > found.valid_from):
                found = latest
        return found

    def tables(self, load: Loader | None = None) -> list[dict[str, Any]]:
        """Every relation seen, current shape first: for ``GET /v1/feeds/{feed}/tables``."""
        out = []
        for relation_id, versions in sorted(self._versions.items()):
            latest = versions[-1]
            out.append({
                "relation_id": relation_id,
                "schema": latest.schema,
                "table": latest.table,
                "name": latest.qualified_name,
                **latest.describe(load),
                "versions": [v.describe(load) for v in versions],
            })
        return out
