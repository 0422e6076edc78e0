"""pgoutput text values -> Python values by type OID, through psycopg's loaders (no catalog queries).

Assumes the replication session's datestyle=ISO, timezone=UTC, extra_float_digits=3 (capture pins
them) and IntervalStyle postgres (the default; iso_8601 is parsed too). Values Python cannot hold
keep PostgreSQL's text form; json/jsonb values are never parsed (``JsonText``: every digit kept).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import time
from typing import Any

from psycopg import adapt, postgres
from psycopg.abc import AdaptContext
from psycopg.pq import Format

from service.assembler.relations import BUILTIN_TYPES, TEXT_ARRAY_OID, TEXT_OID

__all__ = [
    "Interval",
    "JsonText",
    "RowLoader",
    "SpecialFloat",
    "TimeTz",
    "load_value",
    "loader_oid",
    "parse_array",
    "parse_interval",
    "row_loader",
    "sequence_loader",
]

_TEXT = Format.TEXT


# -- value classes the JSON layer renders specially ---------------------------------------------

@dataclass(frozen=True, slots=True)
class Interval:
    """A PostgreSQL interval: months, days and microseconds are independent, as in PostgreSQL."""

    months: int
    days: int
    microseconds: int

    def isoformat(self) -> str:
        """ISO 8601 duration exactly as PostgreSQL's ``IntervalStyle iso_8601`` writes it."""
        months, days, us = self.months, self.days, self.microseconds
        if not (months or days or us):
            return "PT0S"
        year = _trunc_div(months, 12)
        mon = months - year * 12
        hour = _trunc_div(us, 3_600_000_000)
        us -= hour * 3_600_000_000
        minute = _trunc_div(us, 60_000_000)
        us -= minute * 60_000_000
        sec = _trunc_div(us, 1_000_000)
        fsec = us - sec * 1_000_000
        parts = ["P"]
        if year:
            parts.append(f"{year}Y")
        if mon:
            parts.append(f"{mon}M")
        if days:
            parts.append(f"{days}D")
        if hour or minute or sec or fsec:
            parts.append("T")
            if hour:
                parts.append(f"{hour}H")
            if minute:
                parts.append(f"{minute}M")
            if sec or fsec:
                if sec < 0 or fsec < 0:
                    parts.append("-")
                parts.append(str(abs(sec)))
                if fsec:
                    parts.append("." + f"{abs(fsec):06d}".rstrip("0"))
                parts.append("S")
        return "".join(parts)

    __str__ = isoformat


def _trunc_div(a: int, b: int) -> int:
    """C-style division (truncates toward zero), as PostgreSQL's interval2tm."""
    q = abs(a) // b
    return -q if a < 0 else q


class SpecialFloat(float):
    """A float4/float8 NaN, Infinity or -Infinity: a real float, marked so JSON can spell it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"SpecialFloat({float.__repr__(self)})"

    @property
    def text(self) -> str:
        return "NaN" if math.isnan(self) else ("Infinity" if self > 0 else "-Infinity")


class TimeTz(time):
    """A timetz value (a ``time`` with tzinfo), a subclass so the JSON layer can write its offset."""

    __slots__ = ()


# -- interval text -------------------------------------------------------------------------------

_POSTGRES_INTERVAL = re.compile(
    r"(?:(?P<y>[+-]?\d+) years? ?)?(?:(?P<mo>[+-]?\d+) mons? ?)?(?:(?P<d>[+-]?\d+) days? ?)?"
    r"(?:(?P<sign>[+-])?(?P<h>\d+):(?P<mi>\d+):(?P<s>\d+)(?:\.(?P<f>\d{1,6}))?)?")
_ISO_INTERVAL = re.compile(
    r"P(?:(?P<y>-?\d+)Y)?(?:(?P<mo>-?\d+)M)?(?:(?P<d>-?\d+)D)?"
    r"(?:T(?:(?P<h>-?\d+)H)?(?:(?P<mi>-?\d+)M)?(?:(?P<sign>-)?(?P<s>\d+)(?:\.(?P<f>\d{1,6}))?S)?)?")


def parse_interval(text: str) -> Interval | None:
    """Parse an interval in IntervalStyle postgres or iso_8601; None for anything else
    (``infinity``, the sql_standard and postgres_verbose styles)."""
    m = (_ISO_INTERVAL if text.startswith("P") else _POSTGRES_INTERVAL).fullmatch(text)
    if m is None or not text:
        return None
    g = m.groupdict()
    months = int(g["y"] or 0) * 12 + int(g["mo"] or 0)
    days = int(g["d"] or 0)
    frac = int((g["f"] or "").ljust(6, "0"))
    if text.startswith("P"):
        secs = int(g["s"] or 0) * 1_000_000 + frac
        us = (int(g["h"] or 0) * 3600 + int(g["mi"] or 0) * 60) * 1_000_000
        us += -secs if g["sign"] else secs
    else:
        us = ((int(g["h"] or 0) * 60 + int(g["mi"] or 0)) * 60 + int(g["s"] or 0)) * 1_000_000 + frac
        if g["sign"] == "-":
            us = -us
    return Interval(months, days, us)


# -- psycopg loaders -------------------------------------------------------------------------------

class _IntervalLoader(adapt.Loader):
    def load(self, data: Any) -> Interval | str:
        text = bytes(data).decode()
        value = parse_interval(text)
        return text if value is None else value


class _FloatLoader(adapt.Loader):
    def load(self, data: Any) -> float:
        v = float(data)
        return SpecialFloat(v) if v - v else v  # inf - inf and nan - nan are NaN (truthy)


class _TimeTzLoader(adapt.Loader):
    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        self._base = postgres.adapters.get_loader(oid, _TEXT)(oid, context).load  # type: ignore[misc]

    def load(self, data: Any) -> TimeTz:
        t = self._base(data)
        return TimeTz(t.hour, t.minute, t.second, t.microsecond, t.tzinfo)


@dataclass(frozen=True, slots=True)
class JsonText:
    """A json/jsonb value: the document exactly as PostgreSQL printed it, never parsed.

    Parsing would put numbers through floats (``123456789012345678901234567890``,
    ``0.10000000000000000001`` lose digits) and change spacing and escapes; encoders write this
    text as it is (embedded in JSON, as protobuf's ``json_value``, as Arrow's string)."""

    text: str


class _JsonTextLoader(adapt.Loader):
    """json/jsonb text -> ``JsonText``; the document ``null`` -> None (as every encoder and the
    fast paths write it: JSON null, protobuf null_value)."""

    def load(self, data: Any) -> JsonText | None:
        text = bytes(data).decode()
        return None if text == "null" else JsonText(text)


_ADAPTERS = adapt.AdaptersMap(postgres.adapters)
_ADAPTERS.register_loader(114, _JsonTextLoader)
_ADAPTERS.register_loader(3802, _JsonTextLoader)
_ADAPTERS.register_loader(1186, _IntervalLoader)
_ADAPTERS.register_loader(700, _FloatLoader)
_ADAPTERS.register_loader(701, _FloatLoader)
_ADAPTERS.register_loader(1266, _TimeTzLoader)

# Scalar type families with a Python value of their own; every other built-in type loads as text.
_SCALARS = frozenset({
    16,  # bool
    17,  # bytea
    20, 21, 23,  # int8, int2, int4
    114, 3802,  # json, jsonb
    700, 701,  # float4, float8
    1082, 1083, 1114, 1184, 1186, 1266,  # date, time, timestamp, timestamptz, interval, timetz
    1700,  # numeric
})
_ARRAY_OF = {oid: _name for oid, _name in BUILTIN_TYPES.items() if _name.startswith("_")}
_ELEMENT_OID = {oid: next((o for o, n in BUILTIN_TYPES.items() if n == name[1:]), TEXT_OID)
                for oid, name in _ARRAY_OF.items()}
_NO_SPLIT_ARRAYS = frozenset({1020})  # box[]: ';'-delimited and its elements hold commas
_TEXTLIKE = frozenset({18, 19, 25, 1042, 1043})  # "char", name, text, bpchar, varchar


def loader_oid(value_oid: int) -> int:
    """The OID whose psycopg loader gives the contract's Python value for ``value_oid``:
    itself for the supported families and arrays of them, ``text[]`` for other arrays,
    ``text`` for everything else."""
    if value_oid in _SCALARS:
        return value_oid
    element = _ELEMENT_OID.get(value_oid)
    if element is not None and value_oid not in _NO_SPLIT_ARRAYS:
        return value_oid if element in _SCALARS else TEXT_ARRAY_OID
    return TEXT_OID


def _text_load(oid: int) -> Callable[[bytes], Any]:
    tx = adapt.Transformer(_ADAPTERS)
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
        element = _ELEMENT_OID.get(oid)
        if element is None:
            return text
        return _load_array_leniently(text, element)


# -- array text fallback -----------------------------------------------------------------------

def parse_array(text: str, delimiter: str = ",") -> list[Any]:
    """PostgreSQL array text -> nested lists of ``str | None`` (quotes, backslashes, NULL,
    nesting and a ``[lo:hi]=`` dimension prefix handled). Raises ValueError if malformed."""
    pos = 0
    if text.startswith("["):
        pos = text.index("=") + 1
    try:
        value, pos = _parse_list(text, pos, delimiter)
    except IndexError:
        raise ValueError(f"unterminated array literal {text!r}") from None
    if text[pos:].strip():
        raise ValueError(f"trailing characters after array literal {text!r}")
    return value


def _parse_list(text: str, pos: int, delim: str) -> tuple[list[Any], int]:
    if text[pos] != "{":
        raise ValueError(f"expected '{{' at {pos} in {text!r}")
    pos += 1
    out: list[Any] = []
    if text[pos] == "}":
        return out, pos + 1
    while True:
        c = text[pos]
        item: Any
        if c == "{":
            item, pos = _parse_list(text, pos, delim)
        elif c == '"':
            pos += 1
            chars = []
            while text[pos] != '"':
                if text[pos] == "\\":
                    pos += 1
                chars.append(text[pos])
                pos += 1
            pos += 1
            item = "".join(chars)
        else:
            start = pos
            while text[pos] != delim and text[pos] != "}":
                pos += 1
            token = text[start:pos].strip()
            item = None if token.upper() == "NULL" else token.replace("\\", "")
        out.append(item)
        c = text[pos]
        if c == delim:
            pos += 1
        elif c == "}":
            return out, pos + 1
        else:
            raise ValueError(f"unexpected {c!r} at {pos} in {text!r}")


def _load_array_leniently(text: str, element_oid: int) -> Any:
    """An array whose fast load failed: each element loads on its own or keeps its text form."""
    try:
        tree = parse_array(text)
    except ValueError:
        return text
    load = _SINGLE.get(element_oid)
    if load is None:
        load = _SINGLE[element_oid] = _text_load(element_oid)

    def walk(node: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in node:
            if item is None:
                out.append(None)
            elif isinstance(item, list):
                out.append(walk(item))
            else:
                try:
                    out.append(load(item.encode()))
                except Exception:  # noqa: BLE001
                    out.append(item)
        return out

    return walk(tree)


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
    tx = adapt.Transformer(_ADAPTERS)
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
    exec("\n".join(lines), env)  # noqa: S102 - generated from OIDs and indices only
    fn: RowLoader = env["load_row"]
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
            tx = adapt.Transformer(_ADAPTERS)
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
    tx = adapt.Transformer(_ADAPTERS)
    loads = [None if o == TEXT_OID else tx.get_loader(o, _TEXT).load for o in oids]
    elements = [_ELEMENT_OID.get(o) for o in oids]

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

