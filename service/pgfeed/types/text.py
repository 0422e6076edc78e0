"""text and every type no other family claims (varchar, name, enums, domains over text, inet,
ranges, composites, extension types): PostgreSQL's text form as a JSON string, protobuf
string_value, Arrow/Spark string. The registry's default (``registry.rule``)."""

from __future__ import annotations

from pgfeed.protowire import VALUE, text_field
from pgfeed.types.family import PgType, TypeFamily
from pgfeed_client.pgtypes import TEXT_OID

_STRING = VALUE["string_value"]


def _proto(v: str) -> bytes:
    return text_field(_STRING, v)


FAMILY = TypeFamily(
    name="text",
    types=(PgType(TEXT_OID, "string_value", fast="text"),),
    json="a string: PostgreSQL's text form",
    loads=False,
    to_proto={str: _proto},
)
