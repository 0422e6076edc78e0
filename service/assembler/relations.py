"""Relation schemas by version: Relation ('R') and Type ('Y') messages from a feed's schema history.

``RelationCatalog.at(relation_id, before_lsn)`` is the schema a transaction committed at
``before_lsn`` starts with; Relation frames inside its own payload then apply as they come.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import Any

from clients._cursor import format_lsn
from service.assembler.model import FRAME
from service.errors import SchemaError
from service.pgoutput.decode import decode
from service.pgoutput.messages import RelationMessage, TypeMessage

__all__ = [
    "BUILTIN_TYPES",
    "TEXT_ARRAY_OID",
    "TEXT_OID",
    "ColumnSchema",
    "RelationCatalog",
    "RelationSchema",
    "TypeName",
    "resolve_value_oid",
    "schema_message",
]

TEXT_OID = 25
TEXT_ARRAY_OID = 1009
# Types with OIDs below this are built in: pgoutput sends no Type message for them (proto.c).
FIRST_NON_BUILTIN_OID = 10000

# Built-in type OIDs and names (pg_type.typname; arrays are '_' + element), as PostgreSQL 14-18
# ship them. A conformance table: ``tables()`` names columns by it, domains resolve through it.
_BUILTIN_TABLE = """
16 bool 17 bytea 18 char 19 name 20 int8 21 int2 22 int2vector 23 int4 24 regproc 25 text 26 oid
27 tid 28 xid 29 cid 30 oidvector 114 json 142 xml 143 _xml 199 _json 271 _xid8 600 point
601 lseg 602 path 603 box 604 polygon 628 line 629 _line 650 cidr 651 _cidr 700 float4
701 float8 718 circle 719 _circle 774 macaddr8 775 _macaddr8 790 money 791 _money 829 macaddr
869 inet 1000 _bool 1001 _bytea 1002 _char 1003 _name 1005 _int2 1006 _int2vector 1007 _int4
1008 _regproc 1009 _text 1010 _tid 1011 _xid 1012 _cid 1013 _oidvector 1014 _bpchar
1015 _varchar 1016 _int8 1017 _point 1018 _lseg 1019 _path 1020 _box 1021 _float4 1022 _float8
1027 _polygon 1028 _oid 1033 aclitem 1034 _aclitem 1040 _macaddr 1041 _inet 1042 bpchar
1043 varchar 1082 date 1083 time 1114 timestamp 1115 _timestamp 1182 _date 1183 _time
1184 timestamptz 1185 _timestamptz 1186 interval 1187 _interval 1231 _numeric 1266 timetz
1270 _timetz 1560 bit 1561 _bit 1562 varbit 1563 _varbit 1700 numeric 1790 refcursor
2201 _refcursor 2202 regprocedure 2203 regoper 2204 regoperator 2205 regclass 2206 regtype
2207 _regprocedure 2208 _regoper 2209 _regoperator 2210 _regclass 2211 _regtype 2949 _txid_snapshot
2950 uuid 2951 _uuid 2970 txid_snapshot 3220 pg_lsn 3221 _pg_lsn 3614 tsvector 3615 tsquery
3643 _tsvector 3645 _tsquery 3734 regconfig 3735 _regconfig 3769 regdictionary
3770 _regdictionary 3802 jsonb 3807 _jsonb 3904 int4range 3905 _int4range 3906 numrange
3907 _numrange 3908 tsrange 3909 _tsrange 3910 tstzrange 3911 _tstzrange 3912 daterange
3913 _daterange 3926 int8range 3927 _int8range 4072 jsonpath 4073 _jsonpath 4089 regnamespace
4090 _regnamespace 4096 regrole 4097 _regrole 4191 regcollation 4192 _regcollation
4451 int4multirange 4532 nummultirange 4533 tsmultirange 4534 tstzmultirange
4535 datemultirange 4536 int8multirange 5069 xid8 5038 pg_snapshot 5039 _pg_snapshot
6150 _int4multirange 6151 _nummultirange 6152 _tsmultirange 6153 _tstzmultirange
6155 _datemultirange 6157 _int8multirange
"""
_items = _BUILTIN_TABLE.split()
BUILTIN_TYPES: dict[int, str] = {int(o): n for o, n in zip(_items[::2], _items[1::2])}
_BUILTIN_BY_NAME: dict[str, int] = {n: o for o, n in BUILTIN_TYPES.items()}
del _items

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
        base = _BUILTIN_BY_NAME.get(type_name.name)
        if base is not None:
            return base
    return TEXT_ARRAY_OID if type_name.name.startswith("_") else TEXT_OID


@dataclass(frozen=True, slots=True)
class ColumnSchema:
    name: str
    type_oid: int
    typmod: int
    is_key: bool  # part of the replica identity (every column under REPLICA IDENTITY FULL)
    type_name: str | None  # pg_catalog names bare, others schema-qualified; None if never named
    value_oid: int  # the built-in type whose text form the values take (see resolve_value_oid)


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

    def describe(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "valid_from": format_lsn(self.valid_from),
            "replica_identity": self.replica_identity,
            "columns": [
                {"name": c.name, "type_oid": c.type_oid, "type_name": c.type_name,
                 "typmod": c.typmod, "key": c.is_key}
                for c in self.columns
            ],
        }


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

    def add(self, commit_lsn: int,
            frame_or_message: bytes | memoryview | RelationMessage | TypeMessage) -> RelationSchema | None:
        """Record a Relation or Type message of the transaction committed at ``commit_lsn``.

        Returns the version in force after it (None for a Type message).
        """
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
        return RelationSchema(msg.relation_id, msg.namespace or "pg_catalog", msg.relation_name,
                              identity, tuple(columns), 0, valid_from)

    def _add_relation(self, commit_lsn: int, schema: RelationSchema) -> RelationSchema:
        versions = self._versions.setdefault(schema.relation_id, [])
        starts = self._starts.setdefault(schema.relation_id, [])
        i = bisect.bisect_right(starts, commit_lsn)
        if i and versions[i - 1].same_shape(schema):
            return versions[i - 1]
        versions.insert(i, schema)
        starts.insert(i, commit_lsn)
        for n in range(i, len(versions)):  # renumber from the insertion point (usually just one)
            versions[n] = replace(versions[n], version=n + 1)
        return versions[i]

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

    def type_name(self, type_oid: int) -> TypeName | None:
        return self._types.get(type_oid)

    def tables(self) -> list[dict[str, Any]]:
        """Every relation seen, current shape first: for ``GET /v1/feeds/{feed}/tables``."""
        out = []
        for relation_id, versions in sorted(self._versions.items()):
            latest = versions[-1]
            out.append({
                "relation_id": relation_id,
                "schema": latest.schema,
                "table": latest.table,
                "name": latest.qualified_name,
                **latest.describe(),
                "versions": [v.describe() for v in versions],
            })
        return out
