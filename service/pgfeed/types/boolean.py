"""bool: JSON true/false, protobuf bool_value, Arrow/Spark bool."""

from __future__ import annotations

from pgfeed.protowire import VALUE
from pgfeed.types.family import PgType, TypeFamily

_TRUE, _FALSE = VALUE["bool_value"] + b"\x01", VALUE["bool_value"] + b"\x00"


def _proto(v: bool) -> bytes:
    return _TRUE if v else _FALSE


FAMILY = TypeFamily(
    name="boolean",
    types=(PgType(16, "bool_value", fast="bool", shape=rb"t|f"),),
    json="true / false",
    to_proto={bool: _proto},
)
