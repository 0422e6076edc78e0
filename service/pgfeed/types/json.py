"""json, jsonb: the document exactly as PostgreSQL printed it, never parsed (``JsonText``):
embedded in JSON events, protobuf json_value, Arrow/Spark string. The document ``null`` is
``JsonText("null")``, never SQL NULL (None): protobuf's json_value "null", Arrow's string "null";
a JSON event, where both would be ``null``, names such columns in ``json_null``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from psycopg import adapt

from pgfeed.protowire import VALUE, ld_field
from pgfeed.types.family import PgType, TypeFamily
from pgfeed_client._json import embeddable

__all__ = ["FAMILY", "JsonText", "json_document"]

_NULL, _JSON = VALUE["null_value"] + b"\x00", VALUE["json_value"]


@dataclass(frozen=True, slots=True)
class JsonText:
    """A json/jsonb value: the document exactly as PostgreSQL printed it, never parsed.

    Parsing would put numbers through floats (``123456789012345678901234567890``,
    ``0.10000000000000000001`` lose digits) and change spacing and escapes; encoders write this
    text as it is (embedded in JSON, as protobuf's ``json_value``, as Arrow's string)."""

    text: str


class _JsonTextLoader(adapt.Loader):
    """json/jsonb text -> ``JsonText``, the document ``null`` included (SQL NULL never reaches a
    loader: it is None), so that every encoder can keep the two apart."""

    def load(self, data: Any) -> JsonText:
        return JsonText(bytes(data).decode())


def json_document(value: JsonText) -> Any:
    """How a json/jsonb value is written into an event: its text as it is (an ``orjson.Fragment``,
    every digit kept), or, nested past ``MAX_EMBEDDED_DEPTH``, a JSON string holding that text."""
    text = value.text
    return orjson.Fragment(text) if embeddable(text) else text


def proto_json(v: Any, dumps: Any = orjson.dumps) -> bytes:
    """A json/jsonb value -> json_value: PostgreSQL's text as it is (``JsonText``, whatever its
    depth, the document ``null`` included); SQL NULL (None) -> null_value. Any other value (not loaded from json) is written as JSON
    by ``dumps``."""
    if v is None:
        return _NULL
    return ld_field(_JSON, v.text.encode() if type(v) is JsonText else dumps(v))


FAMILY = TypeFamily(
    name="json",
    types=(PgType(114, "json_value", fast="json"), PgType(3802, "json_value", fast="json")),
    json="the document embedded as PostgreSQL printed it (a string past 1,000 levels of nesting)",
    loaders={114: _JsonTextLoader, 3802: _JsonTextLoader},
    to_json={JsonText: json_document},
    to_proto={JsonText: proto_json},
)
