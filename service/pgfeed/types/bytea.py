"""bytea: base64 in JSON, protobuf bytes_value, Arrow/Spark binary (``bytea_output=hex``)."""

from __future__ import annotations

import base64
from typing import Any

from pgfeed.protowire import VALUE, ld_field
from pgfeed.types.family import PgType, TypeFamily

_BYTES = VALUE["bytes_value"]


def _json(v: Any) -> str:
    return base64.b64encode(v).decode()


def _proto(v: bytes | bytearray | memoryview) -> bytes:
    return ld_field(_BYTES, bytes(v))


FAMILY = TypeFamily(
    name="bytea",
    types=(PgType(17, "bytes_value", fast="bytea", shape=rb"\\x(?:[0-9a-f][0-9a-f])*"),),
    json="a string: the bytes in base64",
    to_json={bytes: _json, bytearray: _json, memoryview: _json},
    to_proto={bytes: _proto, bytearray: _proto, memoryview: _proto},
)
