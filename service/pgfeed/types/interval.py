"""interval: an ISO 8601 duration (``P1Y2M3DT4H5M6.5S``, as ``IntervalStyle iso_8601`` writes
it) in JSON and protobuf interval_value; Arrow/Spark string. Months, days and microseconds stay
independent, as in PostgreSQL; a text it cannot parse (``infinity``) stays text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from psycopg import adapt

from pgfeed.protowire import VALUE, text_field
from pgfeed.types.family import PgType, TypeFamily

__all__ = ["FAMILY", "Interval", "parse_interval"]


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


class _IntervalLoader(adapt.Loader):
    def load(self, data: Any) -> Interval | str:
        text = bytes(data).decode()
        value = parse_interval(text)
        return text if value is None else value


_INTERVAL = VALUE["interval_value"]


def _proto(v: Interval) -> bytes:
    return text_field(_INTERVAL, v.isoformat())


FAMILY = TypeFamily(
    name="interval",
    types=(PgType(1186, "interval_value"),),
    json="a string: the ISO 8601 duration",
    loaders={1186: _IntervalLoader},
    to_json={Interval: Interval.isoformat},
    to_proto={Interval: _proto},
)
