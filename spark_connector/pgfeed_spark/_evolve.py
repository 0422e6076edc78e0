"""Several versions of one table in one Spark schema (issue 27.3).

A table's columns are followed through its schema history (``/schema/history``): a column keeps
its identity across versions by name, or across a rename by the ``previous_name`` the server
gives when it captured the DDL (without DDL capture a rename is a drop plus an add: two
columns). ``Lineage`` is the resulting *logical* columns, each with the Spark type that holds
every version's values (int -> bigint, numeric(10,2) -> numeric(12,2), int -> text: string), and
for each version which of its columns feeds which logical column.

Policies (option ``schemaEvolution``), for streaming reads and mirrors:

- ``addNewColumns`` (the default): the schema is the union of the versions from ``from`` to the
  newest when the query starts; dropped columns stay (NULL from then on), a renamed column is one
  column under its newest name. A version the query's schema cannot hold (a new column or name,
  a type the column's cannot hold) ends the micro-batch before it and stops the query with a
  retryable ``SchemaChangedError``; the restart's schema holds it.
- ``fail``: as ``addNewColumns``, but every new version stops the query (a drop and a widening
  too), so nothing changes shape without someone restarting it.
- ``rescue``: never stops: the schema is the version in force at ``from``, plus ``_rescued_data``,
  a JSON object of the values the schema cannot hold (columns it lacks, values of a type it
  cannot hold), by column name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from pgfeed_client import ColumnInfo, Cursor, TableInfo, parse_cursor, parse_lsn
from pgfeed_client._json import dumps_exact
from pgfeed_client.pgtypes import JSON_TYPES, base_name
from pgfeed_spark._schema import (
    KEY_COLUMN,
    METADATA_COLUMNS,
    METADATA_NAMES,
    Converter,
    json_converter,
    spark_type,
)

__all__ = [
    "POLICIES", "RESCUED", "Lineage", "SchemaChangedError", "Version", "describe_change",
    "widen",
]

POLICIES = ("addNewColumns", "fail", "rescue")
DEFAULT_POLICY = "addNewColumns"
RESCUED = "_rescued_data"
META = "pgfeed"  # StructField metadata key: {"previous_names", "missing_value", ...}


class SchemaChangedError(RuntimeError):
    """A streaming query reached a table version its schema was not made for; the micro-batch
    before it is complete, and restarting the query continues with a schema that holds it."""


@dataclass(frozen=True, slots=True)
class Version:
    """One schema version of the table: its number, where it took effect, its columns."""

    number: int
    valid_from: int  # commit LSN of the transaction whose Relation message introduced it
    columns: tuple[ColumnInfo, ...]

    @classmethod
    def of(cls, info: TableInfo) -> Version:
        return cls(info.version, parse_lsn(info.valid_from) if info.valid_from else 0,
                   info.columns)

    def column(self, name: str) -> ColumnInfo | None:
        return next((c for c in self.columns if c.name == name), None)


# -- types --------------------------------------------------------------------------------------

_INTEGRAL = {ByteType: (1, 3), ShortType: (2, 5), IntegerType: (3, 10), LongType: (4, 19)}


def _digits(t: DataType) -> tuple[int, int] | None:
    """(integer digits, scale) a decimal needs to hold every value of ``t``, for exact types."""
    if isinstance(t, DecimalType):
        return t.precision - t.scale, t.scale
    for kind, (_rank, digits) in _INTEGRAL.items():
        if isinstance(t, kind):
            return digits, 0
    return None


def widen(a: DataType, b: DataType) -> DataType:
    """The narrowest Spark type holding every value of both (string when no exact one does)."""
    if a == b:
        return a
    ranks = [next((r for k, (r, _d) in _INTEGRAL.items() if isinstance(t, k)), None) for t in (a, b)]
    if ranks[0] is not None and ranks[1] is not None:
        return a if ranks[0] >= ranks[1] else b
    da, db = _digits(a), _digits(b)
    if da is not None and db is not None:
        scale = max(da[1], db[1])
        precision = max(da[0], db[0]) + scale
        return DecimalType(precision, scale) if precision <= 38 else StringType()
    if isinstance(a, (FloatType, DoubleType)) and isinstance(b, (FloatType, DoubleType)):
        return DoubleType()
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        element = widen(a.elementType, b.elementType)
        return StringType() if isinstance(element, StringType) and not (
            isinstance(a.elementType, StringType) and isinstance(b.elementType, StringType)
        ) else ArrayType(element)
    return StringType()


def _plain(t: Any) -> Any:
    """An Arrow type without its encoding (dictionary, large offsets, timestamp unit): what a
    value can be, which is all ``Lineage.arrow_exact`` compares."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return ("timestamp", t.tz is not None)
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return ("list", _plain(t.value_type))
    return t


def holds(target: DataType, t: DataType) -> bool:
    return widen(target, t) == target


def _into(target: DataType, column: ColumnInfo) -> Converter:
    """A JSON value of ``column`` (as its version served it) -> a value of ``target``."""
    own = spark_type(column.type_name, column.typmod, column.type_oid)
    if own == target:
        return json_converter(column.type_name, column.typmod, column.type_oid)
    if isinstance(target, StringType):
        name = base_name(column.type_name, column.type_oid)
        if name in JSON_TYPES:
            return json_converter(column.type_name, column.typmod, column.type_oid)
        return lambda v: v if v is None or isinstance(v, str) else dumps_exact(v)
    if isinstance(target, ArrayType):
        element = ColumnInfo(column.name, 0, _element_name(column), column.typmod)
        inner = _into(target.elementType, element)
        return lambda v: None if v is None else [inner(x) for x in v]
    # a wider number: the target's own parsing of the JSON value
    probe = {LongType: "int8", IntegerType: "int4", ShortType: "int2", DoubleType: "float8"}
    for kind, name in probe.items():
        if isinstance(target, kind):
            return json_converter(name)
    if isinstance(target, DecimalType):
        return json_converter("numeric", ((target.precision << 16) | target.scale) + 4)
    return json_converter(column.type_name, column.typmod, column.type_oid)


def _element_name(column: ColumnInfo) -> str | None:
    name = base_name(column.type_name, column.type_oid)
    return name[1:] if name and name.startswith("_") else name


# -- lineage ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Logical:
    """One column of the union schema and its name in each version that has it."""

    name: str
    data_type: DataType
    key: bool
    sources: tuple[tuple[int, str], ...]  # (version, column name there), oldest first
    missing: tuple[int, str, ColumnInfo] | None = None  # (version added, JSON text, its column)

    def in_version(self, version: int) -> str | None:
        return next((n for v, n in self.sources if v == version), None)


def _trace(versions: Sequence[Version]) -> list[dict[str, Any]]:
    """Each logical column as {"sources": [(version, name)], "names": [...]} by following names
    and ``previous_name`` from version to version."""
    logicals: list[dict[str, Any]] = []
    current: dict[str, int] = {}  # name in the previous version -> logical index
    for version in versions:
        claimed: set[int] = set()
        nxt: dict[str, int] = {}
        pending = []
        for col in version.columns:  # renames first: they claim the old name's column
            if col.previous_name and col.previous_name in current \
                    and current[col.previous_name] not in claimed:
                claimed.add(current[col.previous_name])
                nxt[col.name] = current[col.previous_name]
            else:
                pending.append(col)
        for col in pending:
            i: int | None = current.get(col.name)
            if i is None or i in claimed:  # a new column, or a name reused after a drop
                i = next((j for j, lg in enumerate(logicals)
                          if lg["name"] == col.name and j not in claimed
                          and j not in current.values()), None)
            if i is None or i in claimed:
                logicals.append({"name": col.name, "sources": [], "columns": []})
                i = len(logicals) - 1
            claimed.add(i)
            nxt[col.name] = i
        for col in version.columns:
            lg = logicals[nxt[col.name]]
            lg["name"] = col.name
            lg["sources"].append((version.number, col.name))
            lg["columns"].append((version.number, col))
        current = nxt
    # a dropped column keeps its name; two logical columns with one name: the older is suffixed
    seen: dict[str, int] = {}
    for i in sorted(range(len(logicals)), key=lambda j: -logicals[j]["sources"][-1][0]):
        name = logicals[i]["name"]
        if name in seen:
            logicals[i]["name"] = f"{name}_v{logicals[i]['sources'][-1][0]}"
        seen[logicals[i]["name"]] = i
    return logicals


@dataclass(frozen=True, slots=True)
class Lineage:
    """The logical columns of a table over ``versions`` (all of them known to the query) and,
    under ``rescue``, only those of the first version (the rest go to ``_rescued_data``)."""

    table: str
    versions: tuple[Version, ...]
    columns: tuple[Logical, ...]
    rescue: bool = False
    # rescue: columns no schema column holds that PostgreSQL gives a missing value: (name,
    # JSON text, the version that added it)
    rescued_missing: tuple[tuple[str, str, int], ...] = ()
    _maps: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)

    def __reduce__(self) -> tuple[Any, ...]:  # without the converters cached in ``_maps``
        return (Lineage, (self.table, self.versions, self.columns, self.rescue,
                          self.rescued_missing))

    @classmethod
    def build(cls, table: str, versions: Sequence[Version], rescue: bool = False) -> Lineage:
        if not versions:
            raise ValueError(f"table {table} has no schema version")
        logicals = _trace(versions)
        first = versions[0].number
        columns = []
        rescued_missing: list[tuple[str, str, int]] = []
        for lg in logicals:
            if rescue and lg["sources"][0][0] != first:
                rescued_missing.extend((c.name, dumps_exact(c.missing_value), v)
                                       for v, c in lg["columns"] if c.has_missing_value)
                continue
            kept = [(v, c) for v, c in lg["columns"]]
            if rescue:  # the first version's type; values it cannot hold are rescued
                kept = kept[:1]
            data_type: DataType | None = None
            for _v, c in kept:
                t = spark_type(c.type_name, c.typmod, c.type_oid)
                data_type = t if data_type is None else widen(data_type, t)
            assert data_type is not None
            newest = lg["columns"][-1][1]
            missing = next(((v, dumps_exact(c.missing_value), c) for v, c in lg["columns"]
                            if c.has_missing_value), None)
            name = lg["sources"][0][1] if rescue else lg["name"]
            columns.append(Logical(name, data_type,
                                   newest.key and lg["sources"][-1][0] == versions[-1].number,
                                   tuple(lg["sources"]), missing))
        return cls(table, tuple(versions), tuple(columns), rescue, tuple(rescued_missing))

    @property
    def numbers(self) -> frozenset[int]:
        return frozenset(v.number for v in self.versions)

    @property
    def newest(self) -> Version:
        return self.versions[-1]

    def version(self, number: int) -> Version | None:
        return next((v for v in self.versions if v.number == number), None)

    def fields(self) -> list[StructField]:
        """The data columns, each with metadata a mirror needs: the names it had before
        (``previous_names``) and, for a column added with a default PostgreSQL did not write into
        existing rows, that value (``missing_value``, JSON text) and the version it came in."""
        out = []
        for lg in self.columns:
            meta: dict[str, Any] = {}
            previous = sorted({n for _v, n in lg.sources if n != lg.name})
            if previous:
                meta["previous_names"] = previous
            if lg.missing is not None:
                version, text, col = lg.missing
                meta.update(missing_value=text, added_in_version=version,
                            missing_type_name=col.type_name or "", missing_typmod=col.typmod,
                            missing_type_oid=col.type_oid)
            out.append(StructField(lg.name, lg.data_type, True, {META: meta} if meta else {}))
        return out

    def schema(self) -> StructType:
        """The typed schema: data columns, ``_rescued_data`` (rescue), metadata, ``_key`` (the
        newest version's key columns)."""
        fields = self.fields()
        clash = {f.name for f in fields} & (METADATA_NAMES | {RESCUED})
        if clash:
            raise ValueError(f"{self.table} has columns named like pgfeed's metadata: "
                             f"{sorted(clash)}")
        missing = [{"name": n, "missing_value": t, "added_in_version": v}
                   for n, t, v in self.rescued_missing]
        rescued = [StructField(RESCUED, StringType(), True,
                               {META: {"missing": missing}} if missing else {})
                   ] if self.rescue else []
        keys = [f for f, lg in zip(fields, self.columns) if lg.key]
        key = [StructField(KEY_COLUMN, StructType([StructField(f.name, f.dataType)
                                                   for f in keys]))] if keys else []
        return StructType(fields + rescued + list(METADATA_COLUMNS) + key)

    # -- one version's rows -------------------------------------------------------------------

    def mapping(self, number: int) -> list[tuple[int, str, Converter]] | None:
        """For rows of version ``number``: (logical index, column name there, converter); None
        for a version this lineage does not know."""
        if number in self._maps:
            cached: list[tuple[int, str, Converter]] = self._maps[number]
            return cached
        version = self.version(number)
        if version is None:
            return None
        out: list[tuple[int, str, Converter]] = []
        for i, lg in enumerate(self.columns):
            name = lg.in_version(number)
            col = version.column(name) if name is not None else None
            if name is None or col is None:
                continue
            if self.rescue and not holds(lg.data_type, spark_type(col.type_name, col.typmod,
                                                                   col.type_oid)):
                continue  # rescued
            out.append((i, name, _into(lg.data_type, col)))
        self._maps[number] = out
        return out

    def rescued(self, number: int) -> list[ColumnInfo]:
        """The columns of version ``number`` whose values go to ``_rescued_data``."""
        mapped = {name for _i, name, _c in self.mapping(number) or ()}
        version = self.version(number)
        return [c for c in version.columns if c.name not in mapped] if version else []

    def arrow_exact(self, number: int, page_types: dict[str, Any]) -> bool:
        """Whether rows of version ``number`` in a typed Arrow page (the server's newest shape:
        ``page_types`` name -> Arrow type) read into this lineage's columns by name exactly: every
        column of the version is in the page under its logical name, with its own type."""
        from pgfeed_spark._arrow import arrow_schema

        version = self.version(number)
        mapping = self.mapping(number)
        if version is None or mapping is None:
            return False
        if self.rescue and len(mapping) != len(version.columns):
            return False
        for i, name, _conv in mapping:
            lg = self.columns[i]
            col = version.column(name)
            assert col is not None
            spark_own = spark_type(col.type_name, col.typmod, col.type_oid)
            if spark_own != lg.data_type and not isinstance(lg.data_type, (
                    LongType, IntegerType, ShortType, DecimalType, DoubleType)):
                return False  # Arrow's cast to text is not the event's text: read as JSON
            own = arrow_schema(StructType([StructField(name, spark_own)])).field(0).type
            theirs = page_types.get(name)
            if lg.name != name or theirs is None or _plain(theirs) != _plain(own):
                return False
        return True

    def holds_version(self, version: Version) -> bool:
        """Whether a query made with this lineage reads ``version`` (newer than it knows) into
        its columns without a new name or a wider type (``addNewColumns`` goes on)."""
        grown = Lineage.build(self.table, [*self.versions, version])
        ours = {(v, n): lg for lg in self.columns for v, n in lg.sources}
        for lg in grown.columns:
            if lg.in_version(version.number) is None:
                continue
            mine = next((ours[s] for s in lg.sources if s in ours), None)
            if mine is None or mine.name != lg.name or not holds(mine.data_type, lg.data_type):
                return False
        return True

    def extended(self, versions: Sequence[Version]) -> Lineage:
        """This lineage's columns, reading also ``versions`` (newer ones the query did not know
        when it started): their columns go to the logical column they continue, by name or by
        ``previous_name``, else (rescue) to ``_rescued_data``."""
        new = [v for v in versions if v.number not in self.numbers]
        if not new:
            return self
        everything = sorted([*self.versions, *new], key=lambda v: v.number)
        grown = Lineage.build(self.table, everything)
        ours = {(v, n): i for i, lg in enumerate(self.columns) for v, n in lg.sources}
        columns = list(self.columns)
        for lg in grown.columns:
            i = next((ours[s] for s in lg.sources if s in ours), None)
            if i is None:
                continue
            extra = tuple(s for s in lg.sources if s[0] in {v.number for v in new})
            columns[i] = Logical(columns[i].name, columns[i].data_type, columns[i].key,
                                 columns[i].sources + extra, columns[i].missing)
        return Lineage(self.table, tuple(everything), tuple(columns), self.rescue,
                       self.rescued_missing)


def versions_in(history: Sequence[TableInfo], start: str, end: str) -> list[Version]:
    """The versions whose rows may be in ``(start, end]`` (cursors; ``earliest``/``latest``):
    from the one in force just before ``start`` (one more when in doubt) to the newest by ``end``."""
    versions = [Version.of(t) for t in history]
    lo = 0
    parsed = parse_cursor(start) if start not in ("earliest",) else None
    if isinstance(parsed, Cursor) and parsed.lsn:
        # a Relation message later in the transaction at ``start`` may still come: strictly before
        before = [i for i, v in enumerate(versions) if v.valid_from < parsed.lsn]
        lo = before[-1] if before else 0
    elif parsed == "latest":
        lo = len(versions) - 1
    hi = len(versions)
    stop = parse_cursor(end)
    if isinstance(stop, Cursor):
        hi = max(lo + 1, len([v for v in versions if v.valid_from <= stop.lsn]))
    return versions[lo:hi]


# -- describing a change ------------------------------------------------------------------------


def _type(c: ColumnInfo) -> str:
    return c.type or c.type_name or str(c.type_oid)


def describe_change(old: Version | None, new: Version) -> str:
    """What changed from ``old`` to ``new``, for an error message: renamed, dropped, added,
    retyped columns."""
    if old is None:
        return f"version {new.number}: " + ", ".join(f"{c.name} {_type(c)}" for c in new.columns)
    lineage = Lineage.build("", [old, new])
    parts = []
    for lg in lineage.columns:
        before, after = lg.in_version(old.number), lg.in_version(new.number)
        if before and after:
            if before != after:
                parts.append(f"renamed {before} to {after}")
            a, b = old.column(before), new.column(after)
            assert a is not None and b is not None
            if _type(a) != _type(b):
                parts.append(f"{after} {_type(a)} -> {_type(b)}")
        elif before:
            parts.append(f"dropped {before}")
        elif after:
            col = new.column(after)
            assert col is not None
            default = f" (rows before it: {col.missing_value!r})" if col.has_missing_value else ""
            parts.append(f"added {after} {_type(col)}{default}")
    return f"version {old.number} -> {new.number}: " + ("; ".join(parts) or "key or identity")


def missing_value(meta: dict[str, Any], target: DataType) -> Any:
    """The Spark value of a ``missing_value`` in a field's metadata (JSON text of the value as a
    JSON event's new image holds it)."""
    type_name, typmod, type_oid = (meta["missing_type_name"] or None, meta["missing_typmod"],
                                   meta["missing_type_oid"])
    from pgfeed_client._json import loads_exact

    value = loads_exact(meta["missing_value"])
    convert: Callable[[Any], Any] = _into(target, ColumnInfo("", int(type_oid), type_name,
                                                             int(typmod)))
    return convert(value)


def rescued_text(values: dict[str, Any]) -> str | None:
    return dumps_exact(values) if values else None
