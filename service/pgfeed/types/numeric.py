"""numeric: a JSON string holding the exact decimal text (plain notation; ``NaN``, ``Infinity``
kept), protobuf numeric_value, Arrow/Spark decimal(p,s) when the typmod allows."""

from __future__ import annotations

from decimal import Decimal

from pgfeed.protowire import VALUE, text_field
from pgfeed.types.family import PgType, TypeFamily

__all__ = ["FAMILY", "plain"]

_NUMERIC = VALUE["numeric_value"]
SHAPE = rb"-?\d+(?:\.\d+)?|NaN|-?Infinity"


def plain(v: Decimal) -> str:
    """A Decimal in plain notation (never ``1E-7``); NaN, Infinity, -Infinity as they are."""
    return format(v, "f")


def _proto(v: Decimal) -> bytes:
    text = str(v)
    if "E" in text:  # 1E+3, 1E-7: write plain notation, as the JSON does
        text = plain(v)
    return text_field(_NUMERIC, text)


FAMILY = TypeFamily(
    name="numeric",
    types=(PgType(1700, "numeric_value", fast="numeric", shape=SHAPE),),
    json="a string holding the exact decimal (plain notation; NaN, Infinity, -Infinity)",
    to_json={Decimal: plain},
    to_proto={Decimal: _proto},
)
