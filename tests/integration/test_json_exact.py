"""json/jsonb values reach readers exactly as PostgreSQL printed them (issue 13, item 2): HTTP (raw
body and client library), gRPC (raw ``json_value`` and client library) and ``pgfeed peek``, on the
fast path and on the reference path (a table with an interval column, which the fast path
declines), on PostgreSQL 15 and 18. Also holds ``jsondocs.jsonb_text`` (the pure tests' model of
what jsonb prints) to the server."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings

from pgfeed_client import FeedClient, GrpcFeedClient
from pgfeed_client._json import embeddable
from tests.fixtures.fix_service import FeedFactory, grpc_changes
from tests.unit.encoding.jsondocs import documents, exact_tree, jsonb_text, same_numbers

pytestmark = pytest.mark.pg

REPO = Path(__file__).resolve().parents[2]

# The issue's document, and the shapes around it that a float would damage.
DOCS = [
    '{"big": 123456789012345678901234567890, "small": 1e-7}',
    '[1E+300, -0.0, 0.10000000000000000001, 18446744073709551616, -9223372036854775809]',
    '{"s": "\\u00e9 \\ud83d\\ude00 \\n \\u0001", "e": [], "o": {}, "z": 1.50}',
    "[" * 600 + "1e-7" + "]" * 600,  # nested past MAX_EMBEDDED_DEPTH (500): a string on HTTP
    "  123456789012345678901234567890  ",
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(batch=documents(50))
def test_jsonb_text_is_what_postgresql_prints(pg_dsn: str, batch: list[str]) -> None:
    """One round trip per 50 documents: json prints its input as is, jsonb as ``jsonb_text``."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT d::json::text, d::jsonb::text FROM unnest(%s::text[]) "
                            "WITH ORDINALITY AS u(d, n) ORDER BY n", (batch,)).fetchall()
    assert [r[0] for r in rows] == batch
    assert [r[1] for r in rows] == [jsonb_text(d) for d in batch]


def _embedded(text: str) -> bytes:
    """How an event holds a document PostgreSQL printed as ``text``."""
    return text.encode() if embeddable(text) else orjson.dumps(text)


def _peek(dsn: str, slot: str, publication: str) -> list[bytes]:
    result = subprocess.run([sys.executable, "-m", "pgfeed", "peek", "--dsn", dsn, "--slot", slot,
                             "--publication", publication, "--json"], check=False,
                            capture_output=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_numbers_reach_readers_exactly(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE fast_docs (id int PRIMARY KEY, doc jsonb, j json)")
        conn.execute("CREATE TABLE slow_docs (id int PRIMARY KEY, span interval, doc jsonb, j json)")
        conn.execute("CREATE PUBLICATION json_pub FOR TABLE fast_docs, slow_docs")
        conn.execute("SELECT pg_create_logical_replication_slot('json_peek', 'pgoutput')")
    name = make_served_feed(pg_dsn, tables=("public.fast_docs", "public.slow_docs"))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for i, doc in enumerate(DOCS):
            conn.execute("INSERT INTO fast_docs VALUES (%s, %s, %s)", (i, doc, doc))
            conn.execute("INSERT INTO slow_docs VALUES (%s, '1 day', %s, %s)", (i, doc, doc))
        printed = {table: conn.execute(f"SELECT doc::text, j::text FROM {table} ORDER BY id").fetchall()
                   for table in ("fast_docs", "slow_docs")}
    assert printed["fast_docs"][0][0] == \
        '{"big": 123456789012345678901234567890, "small": 0.0000001}'  # jsonb's own form
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    expected = [(table, i, *printed[table][i]) for i in range(len(DOCS))  # commit order
                for table in ("fast_docs", "slow_docs")]
    tails = [b'"doc":' + _embedded(doc) + b',"j":' + _embedded(j) + b"}"
             for _, _, doc, j in expected]

    # HTTP: the body holds every document as PostgreSQL printed it
    body = httpx.get(f"{service.http_url}/v1/feeds/{name}/changes",
                     params={"after": "earliest", "limit": 100}, timeout=30).content
    assert len(json.loads(body)["changes"]) == len(expected)
    for tail in tails:
        assert tail in body, tail[:120]
    # ... and the client library parses it with no number rounded
    with FeedClient(service.http_url) as client:
        changes = list(client.iter_changes(name))
    _assert_exact([(c.after["doc"], c.after["j"]) for c in changes], expected)

    # gRPC: json_value is the text itself, at any depth
    raw = grpc_changes(service.grpc_target, name, len(expected))
    assert [(c.after["doc"].json_value, c.after["j"].json_value) for c in raw] == \
        [(doc, j) for _, _, doc, j in expected]
    with GrpcFeedClient(service.grpc_target) as grpc_client:
        txns = list(itertools.islice(grpc_client.subscribe(name), len(expected)))
    _assert_exact([(c.after["doc"], c.after["j"]) for t in txns for c in t.changes], expected)

    # pgfeed peek: the same event lines
    lines = _peek(pg_dsn, "json_peek", "json_pub")
    assert len(lines) == len(expected)
    for line, tail in zip(lines, tails):
        assert line.endswith(tail + b',"unchanged_toast":[],"origin":null}'), line[-200:]


def _assert_exact(values: list[tuple[Any, Any]], expected: list[tuple[str, int, str, str]]) -> None:
    assert len(values) == len(expected)
    for (doc_value, j_value), (_, _, doc, j) in zip(values, expected):
        for value, text in ((doc_value, doc), (j_value, j)):
            if not embeddable(text):
                assert value == text  # too deep to embed: the text itself
            else:
                assert same_numbers(value, exact_tree(text)), (value, text)


def test_the_issue_document_is_not_rounded(make_served_feed: FeedFactory, pg_dsn: str) -> None:
    """The report's own words: no 1.2345678901234568e+29, no 1E-7."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE issue_docs (id int PRIMARY KEY, span interval, doc jsonb)")
    name = make_served_feed(pg_dsn, tables=("public.issue_docs",))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO issue_docs VALUES (1, '1 hour', %s)", (DOCS[0],))
    make_served_feed.caught_up(name, pg_dsn)
    body = httpx.get(f"{make_served_feed.service.http_url}/v1/feeds/{name}/changes",
                     params={"after": "earliest"}, timeout=30).text
    assert '"doc":{"big": 123456789012345678901234567890, "small": 0.0000001}' in body
    assert "e+29" not in body and "E-7" not in body
    assert json.loads(body)["changes"][0]["after"]["doc"]["big"] == 123456789012345678901234567890
