"""What reading rows of one relation version needs, computed once per version: ``RelationPlan``.

The decoder (``changes.TransactionDecoder``) builds one per relation version it meets; the
encoders read it (the compiled encoder's per-column kinds, the json columns). Everything here
follows from the version's columns and the type registry (``service/pgfeed/types``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pgfeed.codegen import define
from pgfeed.decoding.relations import RelationSchema
from pgfeed.decoding.values import RowLoader, row_loader, sequence_loader
from pgfeed.netorder import U16, U32
from pgfeed.types.registry import fast_kind, json_kind

__all__ = ["KeyOf", "RelationPlan", "WireRow"]

KeyOf = Callable[[dict[str, Any]], dict[str, Any] | None]
WireRow = Callable[[bytes | bytearray, int], tuple[dict[str, Any], int]]

_u16_at = U16.unpack_from
_u32_at = U32.unpack_from


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class RelationPlan:
    """One relation version's row plan (identity-hashed, like ``RelationSchema``)."""

    schema: RelationSchema
    name: str  # schema.table
    value_oids: tuple[int, ...]  # per column: the built-in type whose text form it takes
    column_names: tuple[str, ...]
    key_names: tuple[str, ...]  # replica-identity columns
    key_of: KeyOf  # row -> {key column: value}, None without key columns
    load: RowLoader  # TupleData values -> {column: value} (the reference load)
    wire_row: WireRow  # TupleData bytes of 't'/'n' columns -> ({column: value}, next position)
    kinds: tuple[str, ...] | None  # per column: the compiled encoder's kind; None: reference only
    json_kinds: Mapping[str, str]  # json/jsonb columns: "json", arrays of them: "json[]"
    json_columns: frozenset[str]  # the json/jsonb columns (not arrays): where a document null can be

    @classmethod
    def of(cls, schema: RelationSchema) -> RelationPlan:
        oids = tuple(c.value_oid for c in schema.columns)
        names = schema.column_names
        kinds = tuple(fast_kind(o) for o in oids)
        json_kinds = {c.name: k for c in schema.columns if (k := json_kind(c.value_oid))}
        return cls(schema, schema.qualified_name, oids, names, schema.key_columns,
                   _key_getter(schema.key_columns), row_loader(oids, names),
                   _wire_row(oids, names, schema.qualified_name),
                   None if None in kinds else kinds, json_kinds,  # type: ignore[arg-type]
                   frozenset(n for n, k in json_kinds.items() if k == "json"))


def _key_getter(names: tuple[str, ...]) -> KeyOf:
    """``row -> {key column: value}`` (None without key columns); a single key is the common case."""
    if not names:
        return lambda row: None
    if len(names) == 1:
        (name,) = names
        return lambda row: {name: row[name]}
    return lambda row: {k: row[k] for k in names}


_WIRE_ROWS: dict[tuple[tuple[int, ...], tuple[str, ...]], WireRow] = {}


def _wire_row(value_oids: tuple[int, ...], names: tuple[str, ...], what: str) -> WireRow:
    """A generated function: TupleData at ``pos`` -> ``({column: value}, next pos)``, for rows
    whose columns are all 't' or 'n' (nearly all rows). Anything else raises (ValueError,
    IndexError, UnicodeDecodeError, a loader's refusal), and the caller takes the reference
    path: ``decode`` + ``row_loader``. Cached by shape."""
    key = (value_oids, names)
    cached = _WIRE_ROWS.get(key)
    if cached is not None:
        return cached
    loaded, load_sequence = sequence_loader(value_oids)
    width = len(value_oids)
    lines = ["def wire_row(data, pos):",
             f"    if u16(data, pos)[0] != {width}:",
             "        raise ValueError('column count')",
             "    pos += 2"]
    for i in range(width):
        value = f"data[pos:pos + n]{'' if i in loaded else '.decode()'}"
        lines += [
            "    kind = data[pos]",
            "    if kind == 116:",  # 't'
            "        n = u32(data, pos + 1)[0]",
            "        pos += 5",
            f"        v{i} = {value}",
            "        pos += n",
            "    elif kind == 110:",  # 'n'
            f"        v{i} = None",
            "        pos += 1",
            "    else:",
            "        raise ValueError('not a plain row')",
        ]
    if loaded:
        lines.append(f"    {''.join(f'v{i}, ' for i in loaded)}= load_sequence(("
                     f"{''.join(f'v{i}, ' for i in loaded)}))")
    lines.append(f"    return {{{', '.join(f'n{i}: v{i}' for i in range(width))}}}, pos")
    env: dict[str, Any] = {f"n{i}": name for i, name in enumerate(names)}
    env.update(u16=_u16_at, u32=_u32_at, load_sequence=load_sequence)
    fn: WireRow = define("wire_row", lines, env, what)
    if len(_WIRE_ROWS) > 4096:
        _WIRE_ROWS.clear()
    _WIRE_ROWS[key] = fn
    return fn
