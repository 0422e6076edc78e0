"""What a type family declares: the row every registry module fills in (``service/pgfeed/types``).

A family is a set of built-in PostgreSQL types served by one rule. It says, as data:

- ``types``: each type's OID, the compiled encoder's kind for it (``fast``, None: only the
  reference path writes it), the text shape that kind accepts (anything else PostgreSQL may
  print goes to the reference path) and the ``pgfeed.v1.Value`` field its values take;
- ``loaders``: psycopg text loaders replacing psycopg's own (the reference load), and ``loads``:
  False when values stay PostgreSQL's text;
- ``to_json`` / ``to_proto``: how each Python value the load gives is written (JSON: what orjson
  writes in its place; protobuf: the serialized Value);
- the typed-read column (Arrow, Spark) is ``pgfeed_client.pgtypes.column_type`` of the type's name: the
  one table the Spark connector shares (``PgType.column``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from psycopg.adapt import Loader

from pgfeed_client.pgtypes import BUILTIN_TYPES, ColumnType, column_type

__all__ = ["PgType", "TypeFamily"]


@dataclass(frozen=True, slots=True)
class PgType:
    """How one built-in type is served."""

    oid: int
    proto: str  # the pgfeed.v1.Value field (feed.proto) its values take
    fast: str | None = None  # the compiled encoder's kind (service/pgfeed/encoding/_transcode.c)
    shape: bytes | None = None  # regex (full match) of the texts ``fast`` writes; None: any

    @property
    def name(self) -> str:
        return BUILTIN_TYPES[self.oid]

    @property
    def column(self) -> ColumnType:
        """Its column in a typed read (Arrow, Spark), unconstrained (numeric's typmod aside)."""
        return column_type(self.name)


@dataclass(frozen=True, slots=True)
class TypeFamily:
    """One registry module's declaration (see the module docstring)."""

    name: str
    types: tuple[PgType, ...]
    json: str  # the JSON rule, in words (docs/fast-paths.md)
    loads: bool = True  # False: values keep PostgreSQL's text form (str)
    loaders: Mapping[int, type[Loader]] = field(default_factory=dict)
    to_json: Mapping[type, Callable[[Any], Any]] = field(default_factory=dict)
    to_proto: Mapping[type, Callable[[Any], bytes]] = field(default_factory=dict)

    @property
    def oids(self) -> tuple[int, ...]:
        return tuple(t.oid for t in self.types)
