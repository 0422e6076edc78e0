"""Typed Arrow pages (``format=arrow&tables=one``) compiled on the server equal the reference
encoder's pages, byte-exact values, on every supported PostgreSQL: the same feed read over HTTP
twice, once as served (``encoding/arrow_rows.py``) and once with the compiled rows switched off,
in small pages (transactions sliced across pages) and in one page. No Spark: the Spark-level
agreement with the JSON path is tests/integration/test_spark_wire.py."""

from __future__ import annotations

import math
import struct
from typing import Any

import httpx
import psycopg
import pyarrow as pa
import pytest

from pgfeed.encoding import arrow_rows
from tests.fixtures.fix_service import FeedFactory, Service
from tests.integration.test_spark_wire import (
    ARRAY_ROWS,
    ARRAYS_DDL,
    SCALAR_ROWS,
    SCALARS_DDL,
)

pytestmark = [pytest.mark.pg]


def _exact(v: Any) -> Any:
    if isinstance(v, float):
        return ("nan",) if math.isnan(v) else ("float", struct.pack("<d", v))
    if isinstance(v, dict):
        return {k: _exact(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_exact(x) for x in v]
    return v


def _read(base_url: str, feed: str, table: str, limit: int) -> tuple[pa.Schema, list[Any]]:
    rows: list[Any] = []
    schema = None
    cursor = "earliest"
    with httpx.Client(base_url=base_url, timeout=60) as client:
        while True:
            r = client.get(f"/v1/feeds/{feed}/changes", params={
                "after": cursor, "limit": limit, "tables": table, "format": "arrow"})
            r.raise_for_status()
            t = pa.ipc.open_stream(r.content).read_all()
            schema = t.schema
            rows += [_exact(x) for x in t.to_pylist()]
            cursor = r.headers["PgFeed-Next"]
            if r.headers["PgFeed-Has-More"] != "true":
                assert schema is not None
                return schema, rows


def test_compiled_pages_equal_the_reference_encoder(pgfeed_service: Service, pg_dsn: str,
                                                   make_served_feed: FeedFactory,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(SCALARS_DDL.format(t="scalars"))
        conn.execute(ARRAYS_DDL.format(t="arrays"))
        conn.execute("ALTER TABLE scalars ALTER COLUMN blob SET STORAGE EXTERNAL")
    name = make_served_feed(pg_dsn, tables=("public.scalars", "public.arrays"), toast="omit")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with conn.transaction():  # one transaction of both tables, read a few changes a page
            conn.execute(f"INSERT INTO scalars VALUES {', '.join(SCALAR_ROWS)}")
            conn.execute(f"INSERT INTO arrays VALUES {', '.join(ARRAY_ROWS)}")
            conn.execute("UPDATE scalars SET blob = repeat('x', 20000) WHERE id = 4")
        conn.execute("UPDATE scalars SET code = 'z'")  # blob: unchanged TOAST
        conn.execute("UPDATE arrays SET id = id + 10 WHERE id = 1")
        conn.execute("DELETE FROM scalars WHERE id < 3")
        conn.execute("TRUNCATE arrays")
    make_served_feed.caught_up(name, pg_dsn)
    url = pgfeed_service.http_url
    compiled_rows: list[int] = []
    write = arrow_rows.ArrowSink.write

    def counting(self: arrow_rows.ArrowSink, *args: Any) -> Any:
        out = write(self, *args)
        compiled_rows.extend(x for _t, items in out for x in items if type(x) is int)
        return out

    monkeypatch.setattr(arrow_rows.ArrowSink, "write", counting)
    compiled = {(t, n): _read(url, name, t, n) for t in ("public.scalars", "public.arrays")
                for n in (3, 1000)}
    assert sum(compiled_rows) > 0
    monkeypatch.setattr(arrow_rows, "sink_for", lambda *_: None)
    for (table, limit), (schema, rows) in compiled.items():
        ref_schema, ref_rows = _read(url, name, table, limit)
        assert schema == ref_schema
        assert rows == ref_rows, (table, limit)
    scalars = compiled[("public.scalars", 1000)][1]
    assert len(scalars) == 4 + 1 + 4 + 2 and [r["_op"] for r in scalars][-2:] == ["delete"] * 2
    assert [r for r in scalars if r["_unchanged_toast"] == ["blob"]]
    arrays = compiled[("public.arrays", 1000)][1]
    assert [r["_op"] for r in arrays] == ["insert"] * 3 + ["update", "truncate"]
