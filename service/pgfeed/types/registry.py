"""The type registry: every family module's declaration, and the tables derived from them.

Adding a type family means adding a module beside this one (see ``family.py`` for what it
declares), listing it in ``FAMILIES``, and, when it has a fast kind, the kind's case in
``service/pgfeed/encoding/_transcode.c`` (``_kinds.h`` is generated from ``FAST_KINDS``:
``python -m pgfeed.types.kinds_header``). Types no family claims are served by the text family.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import adapt, postgres

from pgfeed.types import (
    array,
    boolean,
    bytea,
    datetime,
    floating,
    integer,
    interval,
    json,
    money,
    numeric,
    text,
    uuid,
)
from pgfeed.types.family import PgType, TypeFamily
from pgfeed_client.pgtypes import TEXT_ARRAY_OID, TEXT_OID

__all__ = [
    "ADAPTERS",
    "FAMILIES",
    "FAST_KINDS",
    "family_of",
    "fast_kind",
    "json_kind",
    "json_writers",
    "loader_oid",
    "proto_writers",
    "type_of",
]

FAMILIES: tuple[TypeFamily, ...] = (
    text.FAMILY, boolean.FAMILY, bytea.FAMILY, integer.FAMILY, json.FAMILY, floating.FAMILY,
    numeric.FAMILY, datetime.FAMILY, interval.FAMILY, uuid.FAMILY, array.FAMILY, money.FAMILY,
)

_BY_OID: dict[int, tuple[TypeFamily, PgType]] = {
    t.oid: (family, t) for family in FAMILIES for t in family.types}

# The compiled encoder's kinds, in the order of its enum (``_kinds.h`` is generated from this).
FAST_KINDS: tuple[str, ...] = tuple(dict.fromkeys(
    t.fast for family in FAMILIES for t in family.types if t.fast is not None))

# psycopg's text loaders with the families' own in place of psycopg's
ADAPTERS = adapt.AdaptersMap(postgres.adapters)
for _family in FAMILIES:
    for _oid, _loader in _family.loaders.items():
        ADAPTERS.register_loader(_oid, _loader)

# scalar types whose values load into Python values of their own (the rest keep their text)
_LOADED = frozenset(t.oid for family in FAMILIES if family.loads and family is not array.FAMILY
                    for t in family.types)


def type_of(value_oid: int) -> PgType:
    """How values of ``value_oid``'s text form are served (the text family's row for a type no
    family claims)."""
    found = _BY_OID.get(value_oid)
    return found[1] if found is not None else text.FAMILY.types[0]


def family_of(value_oid: int) -> TypeFamily:
    found = _BY_OID.get(value_oid)
    return found[0] if found is not None else text.FAMILY


def loader_oid(value_oid: int) -> int:
    """The OID whose psycopg loader gives the contract's Python value for ``value_oid``:
    itself for the loaded families and arrays of them, ``text[]`` for other arrays,
    ``text`` for everything else."""
    if value_oid in _LOADED:
        return value_oid
    element = array.ELEMENT_OID.get(value_oid)
    if element is not None and value_oid not in array.NO_SPLIT:
        return value_oid if element in _LOADED else TEXT_ARRAY_OID
    return TEXT_OID


def fast_kind(value_oid: int) -> str | None:
    """The compiled encoder's kind for a column whose values take ``value_oid``'s text form;
    None when only the reference path writes it."""
    found = _BY_OID.get(value_oid)
    if found is not None:
        return found[1].fast
    return "text" if loader_oid(value_oid) == TEXT_OID else None


def json_kind(value_oid: int) -> str | None:
    """"json" for a json/jsonb column, "json[]" for an array of them, else None: their values
    are documents whatever Python type they load as (the encoders write them as JSON)."""
    if value_oid in json.FAMILY.oids:
        return "json"
    if array.ELEMENT_OID.get(value_oid) in json.FAMILY.oids:
        return "json[]"
    return None


def json_writers() -> dict[type, Callable[[Any], Any]]:
    """Python value type -> what orjson writes in its place (``to_json``'s default hook)."""
    return {t: f for family in FAMILIES for t, f in family.to_json.items()}


def proto_writers() -> dict[type, Callable[[Any], bytes]]:
    """Python value type -> its serialized ``pgfeed.v1.Value`` (``to_proto``)."""
    return {t: f for family in FAMILIES for t, f in family.to_proto.items()}
