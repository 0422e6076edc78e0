"""float4, float8: JSON numbers in their shortest exact form (``extra_float_digits=3``), NaN and
±Infinity as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``; protobuf double_value."""

from __future__ import annotations

import math
import struct
from typing import Any

from psycopg import adapt

from pgfeed.protowire import VALUE
from pgfeed.types.family import PgType, TypeFamily

__all__ = ["FAMILY", "SpecialFloat"]


class SpecialFloat(float):
    """A float4/float8 NaN, Infinity or -Infinity: a real float, marked so JSON can spell it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"SpecialFloat({float.__repr__(self)})"

    @property
    def text(self) -> str:
        return "NaN" if math.isnan(self) else ("Infinity" if self > 0 else "-Infinity")


class _FloatLoader(adapt.Loader):
    def load(self, data: Any) -> float:
        v = float(data)
        return SpecialFloat(v) if v - v else v  # inf - inf and nan - nan are NaN (truthy)


_DOUBLE = struct.Struct("<Bd").pack  # a one-byte tag, then the little-endian double (fixed64)
_DOUBLE_VALUE = VALUE["double_value"][0]


def _proto(v: float) -> bytes:
    return _DOUBLE(_DOUBLE_VALUE, v)  # NaN, ±Infinity and -0.0 travel as IEEE 754 doubles


_SHAPE = rb"-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|NaN|-?Infinity"

FAMILY = TypeFamily(
    name="floating",
    types=(PgType(700, "double_value", fast="float", shape=_SHAPE),
           PgType(701, "double_value", fast="float", shape=_SHAPE)),
    json='a number (shortest exact form); "NaN", "Infinity", "-Infinity" as strings',
    loaders={700: _FloatLoader, 701: _FloatLoader},
    to_json={SpecialFloat: lambda v: v.text},
    to_proto={float: _proto, SpecialFloat: _proto},
)
