"""The typed Arrow wire path (compiled on the server: encoding/arrow_rows.py) against the JSON wire
path, value by value, through Spark, on real PostgreSQL: numerics (NaN, ±Infinity, every digit),
floats (NaN, ±Infinity, -0), time zones, dates and timestamps Arrow cannot hold (infinity, BC),
times (24:00:00), bytea, json/jsonb (big numbers, the document ``null``), unchanged TOAST, key
changes and deletes; and a table with arrays, which the compiled rows leave to the reference."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from pgfeed.encoding import arrow_rows
from pgfeed_client import FeedClient
from pgfeed_client._json import loads_exact

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.pg]

Feed = tuple[str, str]

SCALARS_DDL = """
CREATE TABLE {t} (
  id bigint PRIMARY KEY, small int2, i int4, amount numeric(12,3), big numeric, f float8,
  r real, flag bool, body text, code varchar(20), raw bytea, day date, at_local timestamp,
  at_zone timestamptz, doc jsonb, js json, clock time, uid uuid, blob text
)"""
SCALAR_ROWS = [
    ("(1, 1, 10, 12.345, 'NaN', 'NaN', 1.5, true, 'héllo ☃ \"q\"\n', 'c1', '\\x00ff', '2026-11-22',"
     " '2026-11-22 10:00:00.123456', '2026-11-22 12:00:00.5+02', '{\"a\": [1, 2.50]}',"
     " '[1.0000000000000000001, {\"b\" : null}]', '12:00:00.5',"
     " 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', NULL)"),
    ("(2, -32768, 2147483647, -999999999.999, '123456789012345678901234567890.123456789',"
     " 'Infinity', '-0', false, NULL, NULL, '\\x', 'infinity', 'infinity', '-infinity',"
     " '{\"big\": 123456789012345678901234567890, \"small\": 1e-7}', 'null', '24:00:00', NULL,"
     " NULL)"),
    ("(3, 0, 0, 'NaN', 'Infinity', '-Infinity', 'NaN', NULL, '', '', '\\xdeadbeef', '0044-03-15 BC',"
     " '0044-03-15 12:00:00 BC', '1999-12-31 23:59:59.999999-08', 'null', '{}', '00:00:00',"
     " NULL, NULL)"),
    ("(4, 4, 4, 0.001, '-Infinity', 1e300, 3.4e38, true, 'x', 'y', NULL, '2000-02-29',"
     " '1970-01-01 00:00:00', '2026-03-29 01:30:00+01', '[]', '\"s\"', '23:59:59.999999',"
     " NULL, NULL)"),
]
ARRAYS_DDL = """
CREATE TABLE {t} (id bigint PRIMARY KEY, nums int4[], tags text[], prices numeric(5,2)[],
                  stamps timestamptz[], raws bytea[], flags bool[], floats float8[])"""
ARRAY_ROWS = [  # raw strings: the SQL text as written (array input's quoting, bytea's \\x)
    (r"""(1, '{1,2,3}', '{a,NULL,"c d","e\"f",NULL}', '{1.50,2.25,NaN}',"""
    r""" '{"2026-11-22 12:00:00+02",NULL}', '{"\\x00ff"}', '{t,NULL}', '{NaN,-Infinity}')"""),
    "(2, '{{1,2},{3,4}}', '{}', NULL, '{infinity}', '{}', NULL, '{-0}')",
    """(3, '[0:1]={5,6}', '{"NULL",""}', '{0.01}', '{}', NULL, '{}', '{1e300}')""",
]
JSON_ARRAYS_DDL = "CREATE TABLE {t} (id bigint PRIMARY KEY, docs jsonb[], notes json[])"
JSON_ARRAY_ROWS = ["(1, ARRAY['{\"x\": 1e40}'::jsonb, 'null'], ARRAY['[1.0]'::json])"]


@pytest.fixture
def conn(live_feed: tuple[str, str, str]) -> Iterator[Any]:
    with psycopg.connect(live_feed[2], autocommit=True) as c:
        yield c


@pytest.fixture
def feed(live_feed: tuple[str, str, str]) -> Feed:
    return live_feed[0], live_feed[1]


@pytest.fixture
def compiled_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows the server's compiled path wrote (the service runs in this process)."""
    counts: list[int] = []
    write = arrow_rows.ArrowSink.write

    def counting(self: arrow_rows.ArrowSink, *args: Any) -> Any:
        out = write(self, *args)
        counts.extend(x for _t, items in out for x in items if type(x) is int)
        return out

    monkeypatch.setattr(arrow_rows.ArrowSink, "write", counting)
    return counts


def _wait(feed: Feed, table: str, count: int) -> None:
    import time
    deadline = time.monotonic() + 60
    with FeedClient(feed[0]) as client:
        while len(list(client.iter_changes(feed[1], tables=[table]))) < count:
            assert time.monotonic() < deadline, f"{table}: fewer than {count} changes captured"
            time.sleep(0.3)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if hasattr(a, "asDict") and hasattr(b, "asDict"):  # before tuples: a Row is one
        return _same(a.asDict(), b.asDict())
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(type(a) is type(b) and a == b)


# json/jsonb: Arrow carries PostgreSQL's text, the JSON path the document re-written compactly
# with every number exact (pgfeed_spark._schema._json_text): the same document, number by number
JSON_COLUMNS = {"doc", "js", "docs"}


def _document(v: Any) -> Any:
    if isinstance(v, list):
        return [_document(x) for x in v]
    return v if v is None else ("json", loads_exact(v))


def _both(spark: SparkSession, feed: Feed, table: str) -> tuple[list[Any], list[Any]]:
    def read(wire: str) -> list[Any]:
        df = (spark.read.format("pgfeed").option("url", feed[0]).option("feed", feed[1])
              .option("table", table).option("partitions", 2).option("wireFormat", wire).load())
        return df.orderBy("_commit_lsn", "_seq").collect()

    arrow, json_ = read("arrow"), read("json")
    assert [r["_seq"] for r in arrow] == [r["_seq"] for r in json_]
    for a, j in zip(arrow, json_):
        for name in a.asDict():
            x, y = (_document(a[name]), _document(j[name])) if name in JSON_COLUMNS else (a[name], j[name])
            assert _same(x, y), (name, a[name], j[name], a["_op"], a["id"])
    return arrow, json_


def test_compiled_typed_rows_equal_the_json_path(feed: Feed, conn: Any, spark_session: SparkSession,
                                                 compiled_rows: list[int]) -> None:
    table = f"public.wire_{uuid.uuid4().hex[:8]}"
    conn.execute(SCALARS_DDL.format(t=table))
    conn.execute(f"ALTER TABLE {table} ALTER COLUMN blob SET STORAGE EXTERNAL")
    conn.execute(f"INSERT INTO {table} VALUES {', '.join(SCALAR_ROWS)}")
    big = "".join(uuid.uuid4().hex for _ in range(400))  # 12.8 kB, stored out of line
    conn.execute(f"UPDATE {table} SET blob = %s WHERE id = 4", (big,))
    conn.execute(f"UPDATE {table} SET i = i + 1 WHERE id = 4")  # blob: unchanged TOAST
    conn.execute(f"UPDATE {table} SET id = 40 WHERE id = 4")  # a key change
    conn.execute(f"DELETE FROM {table} WHERE id IN (1, 3)")
    _wait(feed, table, 9)
    compiled_rows.clear()
    arrow, _ = _both(spark_session, feed, table)
    assert len(arrow) == 9
    # rows 2 and 3 hold values the compiled rows hand to the reference (infinity, BC, 24:00:00)
    assert sum(compiled_rows) >= 7, compiled_rows
    toast = next(r for r in arrow if r["_op"] == "update" and r["i"] == 5)
    assert toast["blob"] is None and toast["_unchanged_toast"] == ["blob"]
    moved = next(r for r in arrow if r["id"] == 40)
    assert moved["_key"]["id"] == 4 and moved["blob"] is None and moved["_unchanged_toast"] == ["blob"]
    assert next(r["blob"] for r in arrow if r["_op"] == "update") == big  # the update that set it
    one = next(r for r in arrow if r["id"] == 1 and r["_op"] == "insert")
    assert one["big"] == "NaN" and math.isnan(one["f"]) and one["doc"] == '{"a": [1, 2.50]}'
    assert one["js"] == '[1.0000000000000000001, {"b" : null}]' and one["clock"] == "12:00:00.500000"
    two = next(r for r in arrow if r["id"] == 2)
    assert two["day"] is None and two["at_local"] is None
    assert two["js"] == "null" and two["blob"] is None  # the JSON document null is not SQL NULL
    assert two["doc"] == '{"big": 123456789012345678901234567890, "small": 0.0000001}'  # jsonb's


def test_arrays_agree(feed: Feed, conn: Any, spark_session: SparkSession,
                      compiled_rows: list[int]) -> None:
    """One-dimensional arrays are compiled; other bounds and more dimensions, and json arrays,
    are the reference's."""
    table = f"public.wire_{uuid.uuid4().hex[:8]}"
    conn.execute(ARRAYS_DDL.format(t=table))
    conn.execute(f"INSERT INTO {table} VALUES {', '.join(ARRAY_ROWS)}")
    conn.execute(f"UPDATE {table} SET tags = '{{z}}' WHERE id = 1")
    _wait(feed, table, 4)
    compiled_rows.clear()
    arrow, _ = _both(spark_session, feed, table)
    assert len(arrow) == 4 and arrow[0]["nums"] == [1, 2, 3] and arrow[1]["nums"] is None
    assert arrow[0]["tags"] == ["a", None, "c d", 'e"f', None] and arrow[2]["tags"] == ["NULL", ""]
    assert arrow[0]["raws"] == [bytearray(b"\x00\xff")]
    assert sum(compiled_rows) >= 2, compiled_rows
    docs = f"public.wire_{uuid.uuid4().hex[:8]}"
    conn.execute(JSON_ARRAYS_DDL.format(t=docs))
    conn.execute(f"INSERT INTO {docs} VALUES {', '.join(JSON_ARRAY_ROWS)}")
    _wait(feed, docs, 1)
    (row,), _ = _both(spark_session, feed, docs)
    assert row["docs"][1] is None and row["notes"] == ["[1.0]"]  # the document null; a json array
