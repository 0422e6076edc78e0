"""apply_changes: a typed change DataFrame -> the table it describes (SCD type 1) or its history
(SCD type 2), in the vocabulary of Databricks' APPLY CHANGES / AUTO CDC.

Every change becomes an *event* of one key at one position (``sequence_by``): an upsert (insert,
update, backfill ``read``), a delete, or a truncate (a delete of every key at its position). An
update whose ``_key`` differs from its new key is also a delete of the old key. Unchanged TOAST
values (NULL and named in ``_unchanged_toast``) are taken from the row's previous version: in the
same input, in ``target`` (the existing mirror), or across a key change from the old key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from pgfeed_spark._evolve import META, missing_value, widen
from pgfeed_spark._schema import KEY_COLUMN, METADATA_NAMES

__all__ = ["DEFAULT_SEQUENCE", "SCD2_COLUMNS", "Plan", "apply_changes", "latest_versions", "mirror_events"]

DEFAULT_SEQUENCE = ("_commit_lsn", "_seq")
SCD2_COLUMNS = ("valid_from", "valid_to", "is_current")
TOAST = "_unchanged_toast"  # in a mirror: the columns whose value could not be carried forward
COMMIT_TS = "_commit_ts"
VERSION = "_table_version"

_KIND, _POS, _MOVED, _PENDING, _META = "__kind", "__pos", "__moved", "__toast", "__meta"
_LEFT = "__left"  # the delete of the key a key-changing update left
_UPSERT, _DELETE, _TRUNCATE = "upsert", "delete", "truncate"


@dataclass(frozen=True, slots=True)
class Plan:
    """What a call resolved: the table's columns and the roles the options gave them."""

    data: tuple[str, ...]  # the table's columns, in order
    keys: tuple[str, ...]
    sequence: tuple[str, ...]
    with_ts: bool  # the input has _commit_ts (kept with each version)

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(c for c in self.data if c not in self.keys)


def _condition(expr: str | Column | None, default: str, columns: Sequence[str]) -> Column:
    if expr is None:
        return F.expr(default) if "_op" in columns else F.lit(False)
    return F.expr(expr) if isinstance(expr, str) else expr


def _field(name: str) -> str:
    """A sequence column's name inside ``valid_from``/``valid_to`` (``_commit_lsn`` -> ``commit_lsn``)."""
    return name.lstrip("_") or name


def _pos(plan: Plan) -> Column:
    return F.struct(*[F.col(c).alias(_field(c)) for c in plan.sequence])


def _events(changes: DataFrame, plan: Plan, deletes: Column, truncates: Column) -> DataFrame:
    """One event per change (upsert / delete / truncate), ``__pending`` the TOAST columns to fill."""
    kind = F.when(truncates, F.lit(_TRUNCATE)).when(deletes, F.lit(_DELETE)).otherwise(F.lit(_UPSERT))
    toast = F.col(TOAST) if TOAST in changes.columns else F.array().cast(ArrayType(StringType()))
    pending = F.filter(F.coalesce(toast, F.array().cast(ArrayType(StringType()))),
                       lambda c: reduce(Column.__or__, [(c == F.lit(v)) & F.col(v).isNull()
                                                        for v in plan.values], F.lit(False)))
    moved = F.lit(False)
    if KEY_COLUMN in changes.columns:
        old = F.col(KEY_COLUMN)
        same = reduce(Column.__and__, [F.col(k).eqNullSafe(old.getField(k)) for k in plan.keys])
        moved = old.isNotNull() & ~same
    ev = (changes.withColumn(_KIND, kind).withColumn(_PENDING, pending)
                 .withColumn(_MOVED, (F.col(_KIND) == _UPSERT) & moved).withColumn(_POS, _pos(plan))
                 .withColumn(_LEFT, F.lit(False)))
    if KEY_COLUMN not in changes.columns:
        return ev
    # The key an update left: deleted at the update's position.
    left = ev.where(F.col(_MOVED)).select(*[
        (F.col(KEY_COLUMN).getField(c) if c in plan.keys
         else F.lit(_DELETE) if c == _KIND
         else F.lit(False) if c == _MOVED
         else F.lit(True) if c == _LEFT
         else F.array().cast(ArrayType(StringType())) if c == _PENDING
         else F.col(c) if c in METADATA_NAMES or c in plan.sequence or c == _POS
         else F.lit(None).cast(ev.schema[c].dataType)).alias(c) for c in ev.columns])
    return ev.unionByName(left)


def _check_keys(changes: DataFrame, keys: Sequence[str]) -> None:
    if KEY_COLUMN not in changes.columns:
        return
    key_type = changes.schema[KEY_COLUMN].dataType
    missing = [k for k in keys
               if not isinstance(key_type, StructType) or k not in key_type.fieldNames()]
    if missing:
        raise ValueError(f"{KEY_COLUMN} ({key_type.simpleString()}) does not hold the key columns "
                         f"{missing}: pass the replica-identity columns, or drop {KEY_COLUMN} "
                         "to ignore key changes")


def _truncated(ev: DataFrame, plan: Plan) -> DataFrame:
    """Truncates -> a delete of every key seen, at the truncate's position."""
    truncs = ev.where(F.col(_KIND) == _TRUNCATE).select(*plan.sequence, _POS, *(
        [COMMIT_TS] if plan.with_ts else []))
    keys = ev.where(F.col(_KIND) != _TRUNCATE).select(*plan.keys).distinct()
    rest = [c for c in ev.columns if c not in truncs.columns and c not in plan.keys]
    deletes = keys.crossJoin(truncs).select(
        *[F.col(c) for c in keys.columns + truncs.columns],
        *[(F.lit(_DELETE) if c == _KIND else F.lit(False) if c == _MOVED
           else F.array().cast(ArrayType(StringType())) if c == _PENDING
           else F.lit(None).cast(ev.schema[c].dataType)).alias(c) for c in rest])
    return ev.where(F.col(_KIND) != _TRUNCATE).unionByName(deletes)


def _carry(ev: DataFrame, plan: Plan, probes: bool = False) -> DataFrame:
    """Fill pending TOAST values from the key's previous version (by position). A delete ends
    the chain; a key-changing update too (its previous version is under the old key: see
    ``_bridge``). With ``probes``, each deleted old key of a key change keeps, in ``__p_<col>``,
    what its chain knew just before it."""
    if not plan.values:
        return ev
    w = (Window.partitionBy(*plan.keys).orderBy(_POS)
         .rowsBetween(Window.unboundedPreceding, -1))
    out = ev
    for c in plan.values:
        pending = F.array_contains(F.col(_PENDING), c)
        unknown = F.struct(F.lit(None).cast(ev.schema[c].dataType).alias("v"),
                           F.lit(False).alias("k"))
        own = F.when(F.col(_KIND) != _UPSERT, unknown) \
               .when(~pending, F.struct(F.col(c).alias("v"), F.lit(True).alias("k"))) \
               .when(F.col(_MOVED), unknown)
        before = F.last(own, ignorenulls=True).over(w)
        out = out.withColumn(f"__w_{c}", F.coalesce(own, before))
        if probes:
            out = out.withColumn(f"__p_{c}", F.when(F.coalesce(F.col(_LEFT), F.lit(False)), before))
    still = [F.when(F.array_contains(F.col(_PENDING), c) & ~F.coalesce(F.col(f"__w_{c}.k"),
                                                                         F.lit(False)), F.lit(c))
             for c in plan.values]
    return out.select(*[F.col(f"__w_{c}.v").alias(c) if c in plan.values else F.col(c)
                        for c in ev.columns if c != _PENDING],
                      *([F.col(f"__p_{c}") for c in plan.values] if probes else []),
                      F.filter(F.array(*still), lambda x: x.isNotNull()).alias(_PENDING))


MOVE_ROUNDS = 2  # key changes in a row that each left a TOAST value unchanged, in one input


def _bridge(ev: DataFrame, plan: Plan) -> DataFrame:
    """Pending TOAST values of key-changing updates, from the probe ``_carry`` left on the delete
    of their old key at the same position (a window by position and old key: no join)."""
    pair = [F.when(F.col(_MOVED), F.col(KEY_COLUMN).getField(k))
            .when(F.coalesce(F.col(_LEFT), F.lit(False)), F.col(k)) for k in plan.keys]
    w = Window.partitionBy(F.col(_POS), *pair)
    out = ev
    for c in plan.values:
        out = out.withColumn(f"__s_{c}", F.first(F.col(f"__p_{c}"), ignorenulls=True).over(w))

    def filled(c: str) -> Column:
        return (F.col(_MOVED) & F.array_contains(F.col(_PENDING), c)
                & F.coalesce(F.col(f"__s_{c}.k"), F.lit(False)))

    still = [F.when(F.array_contains(F.col(_PENDING), c) & ~filled(c), F.lit(c))
             for c in plan.values]
    keep = [c for c in ev.columns if not c.startswith("__p_")]
    return out.select(*[F.when(filled(c), F.col(f"__s_{c}.v")).otherwise(F.col(c)).alias(c)
                        if c in plan.values else F.col(c) for c in keep if c != _PENDING],
                      F.filter(F.array(*still), lambda x: x.isNotNull()).alias(_PENDING))


def _carry_across_moves(ev: DataFrame, plan: Plan, rounds: int) -> DataFrame:
    """``_carry`` across key changes: each round fills the key-changing updates whose old key's
    value is known by then (a swap through a temporary key takes two); what is still unknown
    after ``rounds`` stays in ``_unchanged_toast``. Each round is two windows, no self-join."""
    for _ in range(rounds):
        ev = _bridge(_carry(ev, plan, probes=True), plan)
    return _carry(ev, plan)


def _target_events(target: DataFrame, plan: Plan, scd_type: int) -> DataFrame:
    """An existing mirror as events: each version an upsert at its position; in a history, a
    version closed by a delete (no next version starting where it ends) also a delete there."""
    base = [F.col(c) for c in plan.data if c in target.columns]
    toast = F.coalesce(F.col(TOAST), F.array().cast(ArrayType(StringType()))) \
        if TOAST in target.columns else F.array().cast(ArrayType(StringType()))
    if scd_type == 1:
        return target.select(*base, *[F.col(c) for c in plan.sequence],
                             *([F.col(COMMIT_TS)] if plan.with_ts else []),
                             F.lit(_UPSERT).alias(_KIND), toast.alias(_PENDING),
                             F.lit(False).alias(_MOVED), _pos(plan).alias(_POS))

    def at(bound: str) -> list[Column]:
        return [F.col(f"{bound}.{_field(c)}").alias(c) for c in plan.sequence] + (
            [F.col(f"{bound}.commit_ts").alias(COMMIT_TS)] if plan.with_ts else [])

    versions = target.select(*base, *at("valid_from"), F.lit(_UPSERT).alias(_KIND),
                             toast.alias(_PENDING), F.lit(False).alias(_MOVED),
                             F.col("valid_from").alias("__from"), F.col("valid_to").alias("__to"))
    nxt = F.lead("__from").over(Window.partitionBy(*plan.keys).orderBy("__from"))
    closed = (versions.withColumn("__next", nxt)
              .where(F.col("__to").isNotNull() & (F.col("__next").isNull()
                                                  | (F.col("__next") != F.col("__to")))))
    ends = closed.select(*[F.col(k) for k in plan.keys],
                         *[F.lit(None).cast(target.schema[c].dataType).alias(c)
                           for c in plan.data if c in target.columns and c not in plan.keys],
                         *at("__to"), F.lit(_DELETE).alias(_KIND),
                         F.array().cast(ArrayType(StringType())).alias(_PENDING),
                         F.lit(False).alias(_MOVED))
    both = versions.drop("__from", "__to").unionByName(ends)
    return both.withColumn(_POS, _pos(plan))


def latest_versions(ev: DataFrame, plan: Plan) -> DataFrame:
    """The latest event of each key, when it is an upsert (type 1)."""
    order = Window.partitionBy(*plan.keys).orderBy(F.col(_POS).desc())
    return (ev.withColumn("__rank", F.row_number().over(order))
              .where((F.col("__rank") == 1) & (F.col(_KIND) == _UPSERT)).drop("__rank"))


def _scd2(ev: DataFrame, plan: Plan, tracked: Sequence[str]) -> DataFrame:
    """One row per version: a run of upserts whose tracked columns do not change is one version
    (its values the run's last); a delete, or a change of a tracked column, ends it."""
    by_key = Window.partitionBy(*plan.keys).orderBy(_POS)
    is_upsert = F.col(_KIND) == _UPSERT
    prev_upsert = F.lag(F.col(_KIND)).over(by_key) == F.lit(_UPSERT)
    same = reduce(Column.__and__, [F.col(c).eqNullSafe(F.lag(F.col(c)).over(by_key))
                                   for c in tracked], F.lit(True))
    starts = ~(is_upsert & F.coalesce(prev_upsert, F.lit(False)) & same)
    running = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    grouped = ev.withColumn("__start", starts.cast("int")) \
                .withColumn("__grp", F.sum("__start").over(running))
    stamp = F.struct(*[F.col(c).alias(_field(c)) for c in plan.sequence],
                     *([F.col(COMMIT_TS).alias("commit_ts")] if plan.with_ts else []))
    keep = [c for c in plan.data if c not in plan.keys] + [TOAST]
    versions = (grouped.withColumn("__stamp", stamp).withColumnRenamed(_PENDING, TOAST)
                .groupBy(*plan.keys, "__grp")
                .agg(F.min_by(F.col(_KIND), F.col(_POS)).alias(_KIND),
                     F.min_by(F.col("__stamp"), F.col(_POS)).alias("valid_from"),
                     F.max_by(F.struct(*keep), F.col(_POS)).alias("__last")))
    closes = Window.partitionBy(*plan.keys).orderBy(F.col("valid_from"))
    history = (versions.withColumn("valid_to", F.lead("valid_from").over(closes))
               .where(F.col(_KIND) == _UPSERT))
    return history.select(*[F.col(c) if c in plan.keys else F.col(f"__last.{c}").alias(c)
                            for c in plan.data],
                          "valid_from", "valid_to",
                          F.col("valid_to").isNull().alias("is_current"),
                          F.col(f"__last.{TOAST}").alias(TOAST))


def apply_changes(changes: DataFrame, keys: Sequence[str], *,
                  sequence_by: str | Sequence[str] = DEFAULT_SEQUENCE,
                  apply_as_deletes: str | Column | None = None,
                  apply_as_truncates: str | Column | None = None,
                  stored_as_scd_type: int = 1,
                  column_list: Sequence[str] | None = None,
                  except_column_list: Sequence[str] | None = None,
                  track_history_column_list: Sequence[str] | None = None,
                  track_history_except_column_list: Sequence[str] | None = None,
                  target: DataFrame | None = None,
                  move_rounds: int = MOVE_ROUNDS, truncates: bool = True) -> DataFrame:
    """The mirror of ``changes`` (a typed read: ``format("pgfeed").option("table", ...)``).

    SCD type 1: the latest version of each live key: the table's columns, the ``sequence_by``
    columns and ``_commit_ts`` of that version, and ``_unchanged_toast`` (columns whose unchanged
    TOAST value no earlier version supplied; normally empty). SCD type 2: one row per version,
    with ``valid_from``/``valid_to`` (structs of the sequence columns without their leading
    ``_``, and ``commit_ts``; ``valid_to`` NULL while current) and ``is_current``; intervals of a
    key never overlap, a delete or truncate closes one.

    ``keys``: the row identity (the replica-identity columns). ``sequence_by``: column(s) ordering
    changes (default ``_commit_lsn``, ``_seq``). ``apply_as_deletes``/``apply_as_truncates``: SQL
    or Columns (default ``_op = 'delete'`` / ``_op = 'truncate'``). ``column_list`` /
    ``except_column_list``: the table columns kept. ``track_history_column_list`` /
    ``track_history_except_column_list`` (type 2): only changes to these columns open a version;
    others update the version in place. ``target``: the mirror so far (a previous result with the
    same options), merged with ``changes``; a change never overwrites a newer version.
    ``move_rounds``: how many key changes in a row (in ``changes``), each leaving a TOAST value
    unchanged, carry it (a swap through a temporary key takes 2; each round costs a join; 0 when
    ``changes`` is known to hold none). ``truncates=False``: ``changes`` is known to hold none.
    """
    if stored_as_scd_type not in (1, 2):
        raise ValueError(f"stored_as_scd_type must be 1 or 2, not {stored_as_scd_type!r}")
    ev, plan = mirror_events(changes, keys, sequence_by=sequence_by,
                             apply_as_deletes=apply_as_deletes,
                             apply_as_truncates=apply_as_truncates,
                             target=target, stored_as_scd_type=stored_as_scd_type,
                             move_rounds=move_rounds, truncates=truncates)
    kept = [c for c in plan.data if c in plan.keys or (
        (column_list is None or c in column_list) and c not in (except_column_list or ()))]
    if stored_as_scd_type == 1:
        return latest_versions(ev, plan).select(*kept, *plan.sequence,
                                                *([COMMIT_TS] if plan.with_ts else []),
                                                F.col(_PENDING).alias(TOAST))
    tracked = [c for c in plan.values
               if (track_history_column_list is None or c in track_history_column_list)
               and c not in (track_history_except_column_list or ())]
    return _scd2(ev, plan, tracked).select(*kept, *SCD2_COLUMNS, TOAST)


def _evolution(field: StructField) -> dict[str, Any]:
    meta = field.metadata.get(META) if field.metadata else None
    return meta if isinstance(meta, dict) else {}


def _fill_missing(changes: DataFrame, evolution: dict[str, dict[str, Any]]) -> DataFrame:
    """A column added with a default PostgreSQL keeps as a "missing value" (not written into the
    rows that were there): rows of changes decoded with an older version hold that value in the
    source (no change will ever carry it), so they get it here (``_table_version``)."""
    if VERSION not in changes.columns:
        return changes
    for f in changes.schema.fields:
        meta = evolution.get(f.name, {})
        for rescued in meta.get("missing", ()):  # _rescued_data (rescue): into its JSON object
            older = F.col(VERSION).isNotNull() & (F.col(VERSION)
                                                  < F.lit(rescued["added_in_version"]))
            changes = changes.withColumn(f.name, F.when(older, _with_key(
                F.col(f.name), rescued["name"], rescued["missing_value"])).otherwise(F.col(f.name)))
        if "missing_value" not in meta:
            continue
        older = F.col(VERSION).isNotNull() & (F.col(VERSION) < F.lit(meta["added_in_version"]))
        value = F.lit(missing_value(meta, f.dataType)).cast(f.dataType)
        changes = changes.withColumn(f.name, F.when(older, value).otherwise(F.col(f.name)))
    return changes


def _with_key(obj: Column, name: str, value: str) -> Column:
    """A JSON object's text with ``"name": value`` added unless it holds that key already."""
    member = F.lit(json.dumps(name) + ":" + value)
    return (F.when(obj.isNull() | (obj == F.lit("{}")), F.concat(F.lit("{"), member, F.lit("}")))
            .when(obj.contains(json.dumps(name) + ":"), obj)
            .otherwise(F.concat(F.lit("{"), member, F.lit(","),
                                obj.substr(F.lit(2), F.length(obj)))))


def _reconcile(changes: DataFrame, target: DataFrame, sequence: Sequence[str],
               evolution: dict[str, dict[str, Any]]) -> tuple[DataFrame, DataFrame]:
    """The mirror so far (``target``) and ``changes`` over the same columns: a column renamed
    since the mirror was written (``previous_names`` in the change schema's metadata) takes the
    old column's values; one added with a missing value holds it in the existing rows; columns
    the changes no longer have (dropped) stay, NULL in the changes; a type widens to hold both."""
    not_data = {*METADATA_NAMES, *sequence, COMMIT_TS, TOAST, *SCD2_COLUMNS}
    ours = {f.name: f for f in changes.schema.fields if f.name not in not_data}
    theirs = {f.name: f for f in target.schema.fields if f.name not in not_data}
    renamed: dict[str, str] = {}
    for name, f in ours.items():
        if name in theirs:
            continue
        previous = evolution.get(f.name, {}).get("previous_names", ())
        old = next((p for p in previous if p in theirs), None)
        if old is not None:
            renamed[name] = old
    gone = {old for old in renamed.values()}
    columns = []
    for name, f in ours.items():
        source = theirs.get(renamed.get(name, name))
        data_type = f.dataType if source is None else widen(f.dataType, source.dataType)
        if data_type != f.dataType:
            changes = changes.withColumn(name, F.col(name).cast(data_type))
        if source is not None:
            columns.append(F.col(source.name).cast(data_type).alias(name))
        elif "missing_value" in evolution.get(f.name, {}):
            columns.append(F.lit(missing_value(evolution.get(f.name, {}), f.dataType))
                           .cast(data_type).alias(name))
        else:
            columns.append(F.lit(None).cast(data_type).alias(name))
    for name, f in theirs.items():  # dropped from the table: kept, NULL from here on
        if name not in ours and name not in gone:
            changes = changes.withColumn(name, F.lit(None).cast(f.dataType))
            columns.append(F.col(name))
    rest = [F.col(c) for c in target.columns if c not in theirs and c not in ours]
    target = target.select(*columns, *rest)
    for f in changes.schema.fields:  # rescue: rows of the mirror from before a column came
        for rescued in evolution.get(f.name, {}).get("missing", ()):
            if f.name in target.columns:
                target = target.withColumn(f.name, _with_key(
                    F.col(f.name), rescued["name"], rescued["missing_value"]))
    return changes, target


def mirror_events(changes: DataFrame, keys: Sequence[str], *,
                  sequence_by: str | Sequence[str] = DEFAULT_SEQUENCE,
                  apply_as_deletes: str | Column | None = None,
                  apply_as_truncates: str | Column | None = None,
                  target: DataFrame | None = None,
                  stored_as_scd_type: int = 1, move_rounds: int = MOVE_ROUNDS,
                  truncates: bool = True) -> tuple[DataFrame, Plan]:
    """Upserts and deletes per key with TOAST values carried (``apply_changes``' first half);
    ``__meta`` holds the change's other metadata columns."""
    if not keys:
        raise ValueError("apply_changes needs the table's key columns")
    sequence = (sequence_by,) if isinstance(sequence_by, str) else tuple(sequence_by)
    data = tuple(c for c in changes.columns if c not in METADATA_NAMES and c not in sequence)
    unknown = [c for c in (*keys, *sequence) if c not in changes.columns]
    if unknown:
        raise ValueError(f"apply_changes: no column(s) {unknown} in {changes.columns}")
    _check_keys(changes, keys)
    evolution = {f.name: _evolution(f) for f in changes.schema.fields}  # before withColumn
    changes = _fill_missing(changes, evolution)
    if target is not None:
        changes, target = _reconcile(changes, target, sequence, evolution)
        data = tuple(c for c in changes.columns if c not in METADATA_NAMES and c not in sequence)
    plan = Plan(data, tuple(keys), sequence, COMMIT_TS in changes.columns)
    meta = [c for c in changes.columns if c in METADATA_NAMES]
    changes = changes.withColumn(_META, F.struct(*meta) if meta else F.lit(None))
    ev = _events(changes, plan, _condition(apply_as_deletes, "_op = 'delete'", changes.columns),
                 _condition(apply_as_truncates, "_op = 'truncate'", changes.columns))
    ev = ev.select(*plan.data, *plan.sequence, *([COMMIT_TS] if plan.with_ts else []),
                   *([KEY_COLUMN] if KEY_COLUMN in changes.columns else []),
                   _KIND, _PENDING, _MOVED, _POS, _META, _LEFT)
    if target is not None:
        ev = ev.unionByName(_target_events(target, plan, stored_as_scd_type),
                            allowMissingColumns=True)
    if truncates:
        ev = _truncated(ev, plan)
    ev = _carry_across_moves(ev, plan, move_rounds) if KEY_COLUMN in changes.columns \
        else _carry(ev, plan)
    return (ev.drop(KEY_COLUMN) if KEY_COLUMN in ev.columns else ev), plan
