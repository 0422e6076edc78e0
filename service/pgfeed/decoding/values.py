"""pgoutput text values -> Python values by type OID, through psycopg's loaders (no catalog queries).

Which loader a type takes, and the value classes, are the type registry's (``service/pgfeed/types``);
this module applies them to rows. Assumes the replication session's datestyle=ISO, timezone=UTC,
extra_float_digits=3 (capture pins them) and IntervalStyle postgres (the default; iso_8601 is
parsed too). Values Python cannot hold keep PostgreSQL's text form; json/jsonb values are never
parsed (``JsonText``: every digit kept).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from psycopg import adapt
from psycopg.pq import Format

from pgfeed.codegen import define
from pgfeed.types.array import ELEMENT_OID, load_leniently
from pgfeed.types.registry import ADAPTERS, loader_oid
from pgfeed_client.pgtypes import TEXT_OID

__all__ = [
    "RowLoader",
    "load_value",
    "row_loader",
    "sequence_loader",
]

_TEXT = Format.TEXT


def _text_load(oid: int) -> Callable[[bytes], Any]:
    tx = adapt.Transformer(ADAPTERS)
    return tx.get_loader(oid, _TEXT).load


_SINGLE: dict[int, Callable[[bytes], Any]] = {}


def load_value(value_oid: int, text: str | bytes | None) -> Any:
    """One value of a column whose values take ``value_oid``'s text form (see module docstring).

    None stays None, bytes (binary-format values) stay bytes, and text a loader refuses (a date
    Python cannot hold, ``24:00:00``) stays text; arrays fall back element by element.
    """
    if text is None or type(text) is not str:
        return text
    oid = loader_oid(value_oid)
    if oid == TEXT_OID:
        return text
    load = _SINGLE.get(oid)
    if load is None:
        load = _SINGLE[oid] = _text_load(oid)
    try:
        return load(text.encode())
    except Exception:  # noqa: BLE001 - any refusal keeps the text form
        element = ELEMENT_OID.get(oid)
        if element is None:
            return text
        return _load_array_leniently(text, element)


def _load_array_leniently(text: str, element_oid: int) -> Any:
    """An array whose fast load failed: each element loads on its own or keeps its text form."""
    load = _SINGLE.get(element_oid)
    if load is None:
        load = _SINGLE[element_oid] = _text_load(element_oid)
    return load_leniently(text, load)


# -- compiled row loaders -----------------------------------------------------------------------

RowLoader = Callable[[Sequence[Any]], dict[str, Any]]
_ROW_LOADERS: dict[tuple[tuple[int, ...], tuple[str, ...]], RowLoader] = {}


def row_loader(value_oids: Sequence[int], names: Sequence[str]) -> RowLoader:
    """A function TupleData values -> ``{column: value}`` for one relation shape; cached by shape.

    The fast path is generated code doing one ``load_sequence`` for the non-text columns (text
    columns pass through as the str pgoutput gave). A row holding anything the fast path refuses
    (UNCHANGED_TOAST, binary values, a value Python cannot hold) takes the per-column slow path:
    UNCHANGED_TOAST and bytes are kept as they are, refused text stays text.
    """
    key = (tuple(value_oids), tuple(names))
    fn = _ROW_LOADERS.get(key)
    if fn is None:
        if len(_ROW_LOADERS) > 4096:
            _ROW_LOADERS.clear()
        fn = _ROW_LOADERS[key] = _compile_row(*key)
    return fn


def _compile_row(value_oids: tuple[int, ...], names: tuple[str, ...]) -> RowLoader:
    oids = [loader_oid(o) for o in value_oids]
    loaded = [i for i, o in enumerate(oids) if o != TEXT_OID]
    width = len(oids)
    slow = _slow_row(oids, names)
    if len(loaded) == 0:
        def all_text(values: Sequence[Any]) -> dict[str, Any]:
            if len(values) != width:
                raise ValueError(f"row has {len(values)} columns, the relation {width}")
            return dict(zip(names, values))
        return all_text
    tx = adapt.Transformer(ADAPTERS)
    tx.set_loader_types([oids[i] for i in loaded], _TEXT)
    args = [f"v{i}" for i in range(width)]
    outs = [f"x{i}" for i in loaded]
    encoded = ", ".join(f"None if v{i} is None else v{i}.encode()" for i in loaded)
    items = ", ".join(f"n{i}: {'x' if i in loaded else 'v'}{i}" for i in range(width))
    lines = [
        "def load_row(values):",
        "    try:",
        f"        {', '.join(args)}, = values",
        f"        {', '.join(outs)}, = load_sequence(({encoded},))",
        "    except Exception:",
        "        return slow(values)",
        f"    return {{{items}}}",
    ]
    env: dict[str, Any] = {f"n{i}": name for i, name in enumerate(names)}
    env.update(load_sequence=tx.load_sequence, slow=slow)
    fn: RowLoader = define("load_row", lines, env, ", ".join(names))
    return fn


def sequence_loader(value_oids: Sequence[int]) -> tuple[tuple[int, ...], LoadSequence | None]:
    """For callers that hold a row's values in wire form (UTF-8 ``bytes`` or None): the indices of
    the columns that need a loader and one ``load_sequence`` for exactly those (None when every
    column is text-like and is just decoded). It raises on what it refuses; callers fall back to
    ``row_loader`` on decoded values, which keeps refused text as text."""
    key = tuple(value_oids)
    found = _SEQUENCE_LOADERS.get(key)
    if found is None:
        oids = [loader_oid(o) for o in key]
        loaded = tuple(i for i, o in enumerate(oids) if o != TEXT_OID)
        load = None
        if loaded:
            tx = adapt.Transformer(ADAPTERS)
            tx.set_loader_types([oids[i] for i in loaded], _TEXT)
            load = tx.load_sequence
        if len(_SEQUENCE_LOADERS) > 4096:
            _SEQUENCE_LOADERS.clear()
        found = _SEQUENCE_LOADERS[key] = (loaded, load)
    return found


LoadSequence = Callable[[Sequence[Any]], tuple[Any, ...]]
_SEQUENCE_LOADERS: dict[tuple[int, ...], tuple[tuple[int, ...], LoadSequence | None]] = {}


def _slow_row(oids: list[int], names: tuple[str, ...]) -> RowLoader:
    width = len(oids)
    tx = adapt.Transformer(ADAPTERS)
    loads = [None if o == TEXT_OID else tx.get_loader(o, _TEXT).load for o in oids]
    elements = [ELEMENT_OID.get(o) for o in oids]

    def slow(values: Sequence[Any]) -> dict[str, Any]:
        if len(values) != width:
            raise ValueError(f"row has {len(values)} columns, the relation {width}")
        out: dict[str, Any] = {}
        for name, value, load, element in zip(names, values, loads, elements):
            if load is not None and type(value) is str:
                try:
                    value = load(value.encode())
                except Exception:  # noqa: BLE001 - refused text stays text (arrays: per element)
                    if element is not None:
                        value = _load_array_leniently(value, element)
            out[name] = value
        return out

    return slow

