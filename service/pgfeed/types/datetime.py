"""date, time, timetz, timestamp, timestamptz: ISO 8601 strings in JSON (``DateStyle=ISO``,
``TimeZone=UTC`` pinned by the replication session); protobuf date_value / time_value (text),
local_timestamp_value / timestamp_value (google.protobuf.Timestamp); Arrow/Spark date32,
timestamp (no zone), timestamp UTC, string for times. A value Python cannot hold (``infinity``,
BC, years past 9999, ``24:00:00``) keeps PostgreSQL's text."""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Any

from psycopg import adapt, postgres
from psycopg.abc import AdaptContext
from psycopg.pq import Format

from pgfeed.protowire import VALUE, text_field, timestamp_field
from pgfeed.types.family import PgType, TypeFamily

__all__ = ["FAMILY", "TimeTz"]


class TimeTz(time):
    """A timetz value (a ``time`` with tzinfo), a subclass so the JSON layer can write its offset."""

    __slots__ = ()


class _TimeTzLoader(adapt.Loader):
    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        self._base = postgres.adapters.get_loader(oid, Format.TEXT)(oid, context).load  # type: ignore[misc]

    def load(self, data: Any) -> TimeTz:
        t = self._base(data)
        return TimeTz(t.hour, t.minute, t.second, t.microsecond, t.tzinfo)


# PostgreSQL's ISO output, to the character: anything else (a damaged value) is the reference
# path's to judge. A fraction ending in '0' is not PostgreSQL's (it trims them); '24:00:00' is
# valid SQL that Python's time cannot hold; a year past 9999 or BC do not match.
CLOCK = rb"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{0,5}[1-9])?"
DATE = rb"\d{4}-\d\d-\d\d"

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)
_TS, _LOCAL_TS = VALUE["timestamp_value"], VALUE["local_timestamp_value"]
_DATE, _TIME = VALUE["date_value"], VALUE["time_value"]


def _proto_datetime(v: datetime) -> bytes:
    if v.tzinfo is None:  # timestamp without time zone: the wall clock, as if UTC
        d = v - _NAIVE_EPOCH
        return timestamp_field(_LOCAL_TS, d.days * 86400 + d.seconds, d.microseconds)
    d = v - _EPOCH
    return timestamp_field(_TS, d.days * 86400 + d.seconds, d.microseconds)


def _proto_date(v: date) -> bytes:
    return text_field(_DATE, v.isoformat())


def _proto_time(v: time) -> bytes:
    return text_field(_TIME, v.isoformat())


def _iso(v: date | time) -> str:
    # ourselves, not orjson's native writer: orjson 3.13.0 drops a digit of times whose
    # microseconds are 10000-99999 (00:00:00.01 -> "00:00:00.10000"); isoformat is the rule
    return v.isoformat()


FAMILY = TypeFamily(
    name="datetime",
    types=(PgType(1082, "date_value", fast="date", shape=DATE),
           PgType(1083, "time_value", fast="time", shape=CLOCK),
           PgType(1114, "local_timestamp_value", fast="timestamp", shape=DATE + b" " + CLOCK),
           PgType(1184, "timestamp_value", fast="timestamptz", shape=DATE + b" " + CLOCK + rb"\+00"),
           PgType(1266, "time_value")),
    json="a string: ISO 8601 (timestamptz with +00:00, microseconds as Python's isoformat)",
    loaders={1266: _TimeTzLoader},
    to_json={datetime: _iso, date: _iso, time: _iso, TimeTz: _iso},
    to_proto={datetime: _proto_datetime, date: _proto_date, time: _proto_time,
              TimeTz: _proto_time},
)
