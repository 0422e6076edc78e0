"""int2, int4, int8: JSON numbers, protobuf int_value, Arrow/Spark 16/32/64-bit integers."""

from __future__ import annotations

from pgfeed.protowire import SMALL, VALUE, V, text_field, varint
from pgfeed.types.family import PgType, TypeFamily

_INT, _NUMERIC = VALUE["int_value"], VALUE["numeric_value"]
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_SHAPE = rb"-?\d+"


def _proto(v: int) -> bytes:
    if 0 <= v < SMALL:
        return _INT + V[v]
    if _INT64_MIN <= v <= _INT64_MAX:
        return _INT + varint(v)
    return text_field(_NUMERIC, str(v))  # past int64 (only json can hold such an int): exact text


FAMILY = TypeFamily(
    name="integer",
    types=(PgType(20, "int_value", fast="int", shape=_SHAPE),
           PgType(21, "int_value", fast="int", shape=_SHAPE),
           PgType(23, "int_value", fast="int", shape=_SHAPE)),
    json="a number, as PostgreSQL printed it",
    to_proto={int: _proto},
)
