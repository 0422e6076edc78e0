"""PURE: PostgreSQL's built-in type names and OIDs, the column type a typed read gives each, and
the columns every read has (a generic read's change rows, a typed read's metadata).

The one table both sides read: the server's type registry (``service/pgfeed/types``) and Arrow encoder
(``service/pgfeed/encoding/to_arrow.py``) and the Spark connector's schema (``spark_connector/pgfeed_spark/_schema.py``)
map a column to a ``ColumnType`` here, then each to its own library's type with a small table of
kinds. No server dependency: the client distribution ships it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BUILTIN_TYPES",
    "CHANGE_COLUMN_TYPES",
    "COLUMN_KINDS",
    "FIRST_NON_BUILTIN_OID",
    "JSON_TYPES",
    "KEY_COLUMN",
    "METADATA_COLUMN_TYPES",
    "TEXT_ARRAY_OID",
    "TEXT_OID",
    "ColumnType",
    "base_name",
    "builtin_oid",
    "column_type",
    "element_is_json",
    "is_json",
    "numeric_precision",
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

# SQL spellings of the names below (``/tables`` and users may give either).
_ALIASES = {
    "smallint": "int2", "integer": "int4", "int": "int4", "bigint": "int8", "real": "float4",
    "double precision": "float8", "boolean": "bool", "decimal": "numeric",
    "timestamp without time zone": "timestamp", "timestamp with time zone": "timestamptz",
}
JSON_TYPES = frozenset({"json", "jsonb"})

# The column kind of a typed read (Arrow, Spark) by base type name; every other type is "string"
# (its JSON value as a string, or its JSON text), arrays are "list" of their element's.
_KIND_OF = {
    "int2": "int16", "int4": "int32", "int8": "int64", "float4": "float32", "float8": "float64",
    "bool": "bool", "bytea": "binary", "date": "date", "timestamp": "timestamp",
    "timestamptz": "timestamptz", "numeric": "decimal",
}
COLUMN_KINDS = frozenset({*_KIND_OF.values(), "string", "list"})


@dataclass(frozen=True, slots=True)
class ColumnType:
    """What a typed read makes of a column: ``kind`` (one of ``COLUMN_KINDS``), with precision
    and scale for "decimal" and the element's type for "list"."""

    kind: str
    precision: int = 0
    scale: int = 0
    element: ColumnType | None = None


_STRING = ColumnType("string")
_INT64, _TIMESTAMPTZ = ColumnType("int64"), ColumnType("timestamptz")
_STRINGS = ColumnType("list", element=_STRING)

# A generic read: one row per change event, row images and truncate options as JSON text, LSNs
# as 64-bit positions (they sort numerically).
CHANGE_COLUMN_TYPES: tuple[tuple[str, ColumnType], ...] = (
    ("lsn", _INT64), ("seq", _INT64), ("commit_lsn", _INT64), ("commit_ts", _TIMESTAMPTZ),
    ("xid", _INT64), ("op", _STRING), ("schema", _STRING), ("table", _STRING),
    ("key", _STRING), ("before", _STRING), ("after", _STRING),  # JSON text
    ("unchanged_toast", _STRINGS), ("origin", _STRING), ("prefix", _STRING),
    ("content", ColumnType("binary")), ("transactional", ColumnType("bool")),
    ("tables", _STRINGS), ("options", _STRING),  # JSON text
    ("toast_filled", _STRINGS),
    # the table's schema version a row change was decoded with; JSON text of the event's
    # json_null (per image, the json/jsonb columns holding the document null), NULL when none
    ("table_version", ColumnType("int32")), ("json_null", _STRING),
    # op "ddl": JSON text of the event's ddl object (a captured DDL command), NULL otherwise
    ("ddl", _STRING),
)
# A typed read's metadata, after the table's own columns: which change, where in the log, and
# which columns were unchanged TOAST (NULL in the row, but not changed to NULL). Then KEY_COLUMN,
# when the table has key columns: a struct of them, the contract's ``key`` (the key before the
# change), which is how a key-changing update names the key it left.
METADATA_COLUMN_TYPES: tuple[tuple[str, ColumnType], ...] = (
    ("_op", _STRING), ("_lsn", _INT64), ("_seq", _INT64), ("_commit_lsn", _INT64),
    ("_commit_ts", _TIMESTAMPTZ), ("_xid", _INT64), ("_unchanged_toast", _STRINGS),
    # the table's schema version the change was decoded with (GET …/tables/{table}/schema?at=)
    ("_table_version", ColumnType("int32")),
)
KEY_COLUMN = "_key"


def builtin_oid(name: str) -> int | None:
    """The OID of a built-in type name (``int4``, ``_text``), None for any other name."""
    return _BUILTIN_BY_NAME.get(name)


def base_name(type_name: str | None, type_oid: int = 0) -> str | None:
    """A column's type as a built-in name (``int4``; arrays ``_int4``), from its display name
    (``integer``, ``pg_catalog.int4``, ``int4[]``) or, when it has none, its OID."""
    if type_name is None:
        return BUILTIN_TYPES.get(type_oid)
    name = type_name.strip().lower().removeprefix("pg_catalog.")
    if name.endswith("[]"):
        name = "_" + name[:-2]
    return _ALIASES.get(name, name)


def numeric_precision(typmod: int) -> tuple[int, int] | None:
    """numeric's atttypmod -> (precision, scale); None for unconstrained ``numeric``.

    PostgreSQL 15+ allows a negative scale (stored as 11-bit two's complement)."""
    if typmod < 4:
        return None
    packed = typmod - 4
    return (packed >> 16) & 0xFFFF, ((packed & 0x7FF) ^ 1024) - 1024


def column_type(type_name: str | None, typmod: int = -1, type_oid: int = 0) -> ColumnType:
    """A column's typed-read type: exact where Arrow and Spark can hold every value, else string.

    int2/4/8 -> int16/32/64; numeric(p,s) -> decimal(p,s) when 1 <= p <= 38 and 0 <= s <= p,
    other numerics -> string; float4/8 -> float32/64; bool; bytea -> binary; date; timestamp
    (no zone); timestamptz; arrays -> list of the element; everything else -> string."""
    name = base_name(type_name, type_oid)
    if name is None:
        return _STRING
    if name.startswith("_"):
        return ColumnType("list", element=column_type(name[1:], typmod))
    kind = _KIND_OF.get(name)
    if kind is None:
        return _STRING
    if kind == "decimal":
        ps = numeric_precision(typmod)
        if ps is not None and 1 <= ps[0] <= 38 and 0 <= ps[1] <= ps[0]:
            return ColumnType("decimal", ps[0], ps[1])
        return _STRING
    return ColumnType(kind)


def is_json(type_name: str | None, type_oid: int = 0) -> bool:
    """A json/jsonb column (its values are documents, written as PostgreSQL's text)."""
    return base_name(type_name, type_oid) in JSON_TYPES


def element_is_json(type_name: str | None, type_oid: int = 0) -> bool:
    """An array of json/jsonb."""
    name = base_name(type_name, type_oid) or ""
    return name.startswith("_") and name[1:] in JSON_TYPES
