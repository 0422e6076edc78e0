"""FeedClient and AsyncFeedClient against httpx.MockTransport: paging, follow, resume after transport
errors, error mapping, Arrow paging, consumers and admin request shapes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pyarrow as pa
import pytest

from pgfeed_client import (
    AsyncFeedClient,
    ClientError,
    Cursor,
    CursorExpired,
    FeedClient,
    FeedNotFound,
    InvalidCursor,
    RetryPolicy,
    TransportFailed,
    Unauthorized,
    format_lsn,
    parse_cursor,
)
from tests.fixtures.fix_http import serve_app

FAST = RetryPolicy(retries=3, initial=0.001, maximum=0.002)


def _change(commit_lsn: int, seq: int, table: str = "orders") -> dict[str, Any]:
    return {"lsn": format_lsn(commit_lsn - 0x10 + seq), "seq": seq,
            "commit_lsn": format_lsn(commit_lsn), "xid": commit_lsn,
            "commit_ts": "2026-11-22T10:00:00.123456+00:00", "op": "insert", "schema": "public",
            "table": table, "key": {"id": seq}, "after": {"id": seq, "n": "1.50"},
            "unchanged_toast": [], "origin": None}


class FakeFeed:
    """A tiny stand-in for the service's /changes: transactions of 3 changes each."""

    def __init__(self, transactions: int = 5, per_txn: int = 3) -> None:
        self.log: list[dict[str, Any]] = [
            _change(0x1000 * (t + 1), s) for t in range(transactions) for s in range(per_txn)]
        self.per_txn = per_txn
        self.requests: list[httpx.Request] = []
        self.fail_next: list[Exception | int] = []
        self.on_wait: Any = None

    @staticmethod
    def _key(c: dict[str, Any]) -> tuple[int, int]:
        cur = parse_cursor(c["commit_lsn"])
        assert cur != "latest"
        return (cur.lsn, c["seq"])

    def head(self) -> str:
        return self.log[-1]["commit_lsn"] if self.log else "0/0"

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.fail_next:
            failure = self.fail_next.pop(0)
            if isinstance(failure, Exception):
                raise failure
            return httpx.Response(failure, json={"error": {"code": "unavailable",
                                                           "message": "try later"}})
        if request.url.path != "/v1/feeds/shop/changes":
            return httpx.Response(404, json={"error": {"code": "feed_not_found",
                                                       "message": "no feed"}})
        q = request.url.params
        after = q.get("after", "earliest")
        if after == "latest":
            return httpx.Response(200, json={"changes": [], "next": self.head(),
                                             "head": self.head(), "has_more": False})
        cur = parse_cursor(after)
        assert cur != "latest"
        limit = int(q.get("limit", 1000))
        rest = [c for c in self.log if not cur.includes(*self._key(c))]
        if not rest and q.get("wait") and self.on_wait is not None:
            self.on_wait(self)
            rest = [c for c in self.log if not cur.includes(*self._key(c))]
        to = q.get("to")
        if to is not None:
            stop = parse_cursor(to)
            assert stop != "latest"
            rest = [c for c in rest if stop.includes(*self._key(c))]
        page = rest[:limit]
        if page:
            last = page[-1]
            nxt = (last["commit_lsn"] if last["seq"] == self.per_txn - 1
                   else f"{last['commit_lsn']}:{last['seq']}")
        else:
            nxt = str(cur) if cur.lsn else after
        envelope = {"next": nxt, "head": self.head(), "has_more": len(rest) > limit}
        if q.get("format") == "count":  # the page's envelope and how many changes it holds
            return httpx.Response(200, json={"count": len(page), **envelope})
        return httpx.Response(200, json={"changes": page, **envelope})


def _client(feed: FakeFeed) -> FeedClient:
    return FeedClient("http://pgfeed.test", transport=httpx.MockTransport(feed), retry=FAST)


def test_iter_changes_pages_through_everything_in_order() -> None:
    feed = FakeFeed()
    with _client(feed) as client:
        got = list(client.iter_changes("shop", limit=4))
    assert [(c.commit_lsn, c.seq) for c in got] == [(c["commit_lsn"], c["seq"]) for c in feed.log]
    assert [r.url.params["after"] for r in feed.requests] == [
        "earliest", "0/2000:0", "0/3000:1", "0/4000"]
    assert got[0].after == {"id": 0, "n": "1.50"} and got[0].commit_ts is not None
    assert got[0].cursor == Cursor(0x1000, 0)


def test_iter_changes_passes_filters_and_starts_after_cursor() -> None:
    feed = FakeFeed()
    with _client(feed) as client:
        got = list(client.iter_changes("shop", after="0/4000:1", tables=["public.orders", "public.x"],
                                       ops="insert,update"))
    assert [(c.commit_lsn, c.seq) for c in got] == [("0/4000", 2), ("0/5000", 0), ("0/5000", 1),
                                                     ("0/5000", 2)]
    params = feed.requests[0].url.params
    assert params["tables"] == "public.orders,public.x" and params["ops"] == "insert,update"
    assert "wait" not in params


def test_follow_long_polls_and_yields_what_arrives() -> None:
    feed = FakeFeed(transactions=1)

    def arrive(f: FakeFeed) -> None:
        f.log.extend(_change(0x9000, s) for s in range(3))

    feed.on_wait = arrive
    with _client(feed) as client:
        it = client.iter_changes("shop", follow=True, wait=5)
        got = [next(it) for _ in range(6)]
    assert [c.commit_lsn for c in got] == ["0/1000"] * 3 + ["0/9000"] * 3
    assert feed.requests[-1].url.params["wait"] == "5"


def test_resume_after_transport_error_from_last_cursor_without_gap_or_duplicate() -> None:
    feed = FakeFeed()
    with _client(feed) as client:
        it = client.iter_changes("shop", limit=4)
        first = [next(it) for _ in range(4)]
        feed.fail_next = [httpx.ConnectError("reset"), httpx.ReadTimeout("slow"), 503]
        rest = list(it)
    got = first + rest
    assert [(c.commit_lsn, c.seq) for c in got] == [(c["commit_lsn"], c["seq"]) for c in feed.log]
    afters = [r.url.params["after"] for r in feed.requests]
    assert afters[1:5] == ["0/2000:0"] * 4  # three failures, then the same cursor again


def test_retries_are_bounded() -> None:
    feed = FakeFeed()
    feed.fail_next = [httpx.ConnectError("down")] * 10
    with _client(feed) as client, pytest.raises(TransportFailed) as info:
        list(client.iter_changes("shop"))
    assert len(feed.requests) == 1 + FAST.retries
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_backoff_is_exponential_and_capped() -> None:
    delays = list(RetryPolicy(retries=6, initial=0.1, maximum=0.5).delays())
    assert len(delays) == 6 and all(d <= 0.5 for d in delays)
    assert 0.05 <= delays[0] <= 0.1 and delays[-1] >= 0.25


def _error_client(status: int, body: Any) -> FeedClient:
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return FeedClient("http://x", transport=httpx.MockTransport(handler), retry=FAST)


def _err(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def test_error_mapping() -> None:
    with pytest.raises(FeedNotFound) as nf:
        _error_client(404, _err("feed_not_found", "no feed 'x'")).page("x")
    assert nf.value.code == "feed_not_found" and nf.value.status == 404
    assert nf.value.message == "no feed 'x'"

    with pytest.raises(CursorExpired) as gone:
        _error_client(410, _err("cursor_expired", "oldest available is 0/1A2B", oldest="0/1A2B")
                      ).page("x", "0/1")
    assert gone.value.oldest == "0/1A2B"
    with pytest.raises(CursorExpired) as gone2:  # no field: taken from the message
        _error_client(410, _err("cursor_expired", "cursor 0/1 is older than 16/B374D848")).page("x")
    assert gone2.value.oldest == "16/B374D848"

    with pytest.raises(InvalidCursor, match="expected"):
        _error_client(400, _err("invalid_cursor", "malformed cursor 'x': expected ...")).page("x")
    for status in (401, 403):
        with pytest.raises(Unauthorized):
            _error_client(status, _err("unauthorized", "token")).page("x")
    with pytest.raises(ClientError) as other:
        _error_client(500, "Internal Server Error").page("x")
    assert type(other.value) is ClientError and other.value.status == 500
    assert "Internal Server Error" in other.value.message


def test_unavailable_is_retried_then_raised() -> None:
    client = _error_client(503, _err("unavailable", "starting"))
    with pytest.raises(ClientError) as info:
        client.page("x")
    assert info.value.status == 503 and info.value.code == "unavailable"


def test_token_and_paths() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        path = request.url.path
        if path.endswith("/splits"):
            return httpx.Response(200, json={"boundaries": ["0/10", "0/20", "0/30"]})
        if path.endswith("/tables"):
            version = {"version": 2, "valid_from": "0/10", "replica_identity": "default",
                       "columns": [{"name": "id", "type_oid": 20, "type_name": "int8",
                                    "typmod": -1, "key": True}]}
            return httpx.Response(200, json={"tables": [{  # the server's TablesOut
                **version, "relation_id": 16384, "schema": "public", "table": "t",
                "name": "public.t", "versions": [version]}]})
        if "/consumers/" in path and request.method == "GET":
            if path.endswith("/nobody"):
                return httpx.Response(404, json=_err("consumer_not_found", "no consumer"))
            return httpx.Response(200, json={"cursor": "0/20:3"})
        if request.method == "DELETE":
            return httpx.Response(204)
        if path == "/v1/feeds" and request.method == "GET":
            return httpx.Response(200, json={"feeds": [{"name": "shop"}]})
        return httpx.Response(200, json={"name": "shop", "state": "running"})

    with FeedClient("http://x/", token="s3cret", transport=httpx.MockTransport(handler)) as c:
        assert c.splits("shop", "earliest", "0/30", n=2) == ["0/10", "0/20", "0/30"]
        (table,) = c.tables("shop")
        assert table.qualified_name == "public.t" and table.key_columns == ("id",)
        assert table.version == 2 and table.columns[0].type_name == "int8"
        c.ack("shop", "spark-1", Cursor(0x20, 3))
        assert c.consumer("shop", "spark-1") == "0/20:3"
        assert c.consumer("shop", "nobody") is None
        assert c.create_feed("shop", "dbname=shop", tables=["public.t"])["state"] == "running"
        assert c.list_feeds() == [{"name": "shop"}]
        assert c.get_feed("shop")["name"] == "shop"
        c.pause("shop")
        c.resume("shop")
        c.delete_feed("shop")
    assert all(r.headers["authorization"] == "Bearer s3cret" for r in seen)
    by = [(r.method, r.url.path) for r in seen]
    assert ("PUT", "/v1/feeds/shop/consumers/spark-1") in by
    assert ("POST", "/v1/feeds/shop/pause") in by and ("DELETE", "/v1/feeds/shop") in by
    put = next(r for r in seen if r.method == "PUT")
    assert json.loads(put.content) == {"cursor": "0/20:3"}
    post = next(r for r in seen if r.url.path == "/v1/feeds" and r.method == "POST")
    assert json.loads(post.content)["tables"] == ["public.t"]
    split = next(r for r in seen if r.url.path.endswith("/splits"))
    assert dict(split.url.params) == {"from": "earliest", "to": "0/30", "n": "2"}


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_read_arrow_follows_the_next_header_to_the_end() -> None:
    schema = pa.schema([("commit_lsn", pa.string()), ("seq", pa.int32())])
    pages = {"earliest": (["0/10", "0/10"], "0/10"), "0/10": (["0/20"], "0/20"),
             "0/20": (["0/30"], "0/30")}
    seen: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        q = dict(request.url.params)
        seen.append(q)
        if q.get("after") == "latest":
            return httpx.Response(200, json={"changes": [], "next": "0/30", "head": "0/30",
                                             "has_more": False})
        rows, nxt = pages[q["after"]]
        table = pa.table({"commit_lsn": rows, "seq": list(range(len(rows)))}, schema=schema)
        return httpx.Response(200, content=_ipc(table), headers={"PgFeed-Next": nxt})

    with FeedClient("http://x", transport=httpx.MockTransport(handler)) as c:
        table = c.read_arrow("shop", table="public.orders")
    assert table.schema == schema and table.column("commit_lsn").to_pylist() == [
        "0/10", "0/10", "0/20", "0/30"]
    reads = [q for q in seen if q["after"] != "latest"]
    assert all(q["format"] == "arrow" and q["to"] == "0/30" and q["tables"] == "public.orders"
               for q in reads)
    assert len(reads) == 3


def test_arrow_pages_from_a_small_first_page_double_up_to_the_limit() -> None:
    """``first_limit``: the first page asks for that many changes, each next one for twice as
    many, never more than ``limit``; without it every page asks for ``limit``."""
    schema = pa.schema([("seq", pa.int32())])
    seen: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        q = dict(request.url.params)
        seen.append(int(q["limit"]))
        n = len(seen)
        return httpx.Response(200, content=_ipc(pa.table({"seq": [n]}, schema=schema)),
                              headers={"PgFeed-Next": f"0/{n}0", "PgFeed-Has-More": "true"})

    with FeedClient("http://x", transport=httpx.MockTransport(handler)) as c:
        pages = c.iter_arrow_pages("shop", "earliest", "0/60", limit=1000, first_limit=150)
        assert [p.num_rows for p in pages] == [1] * 6
        assert seen == [150, 300, 600, 1000, 1000, 1000]
        seen.clear()
        assert len(list(c.iter_arrow_pages("shop", "earliest", "0/20", limit=1000))) == 2
        assert seen == [1000, 1000]
        seen.clear()
        list(c.iter_arrow_pages("shop", "earliest", "0/20", limit=100, first_limit=500))
        assert seen == [100, 100]


def test_async_client_pages_and_resumes() -> None:
    feed = FakeFeed()

    async def main() -> list[tuple[str, int]]:
        out = []
        async with AsyncFeedClient("http://pgfeed.test", transport=httpx.MockTransport(feed),
                                   retry=FAST) as client:
            async for change in client.iter_changes("shop", limit=5):
                out.append((change.commit_lsn, change.seq))
                if len(out) == 5:
                    feed.fail_next = [httpx.ConnectError("reset")]
            with pytest.raises(FeedNotFound):
                await client.page("nope")
        return out

    got = asyncio.run(main())
    assert got == [(c["commit_lsn"], c["seq"]) for c in feed.log]
    afters = [r.url.params.get("after") for r in feed.requests]
    assert afters[1] == afters[2] == "0/2000:1"


def test_arrow_pages_are_read_into_one_buffer_over_loopback_with_retries_and_typed_errors() -> None:
    """Against a real server, Arrow pages bypass httpx (``_bulk.BulkReader``: no
    Accept-Encoding, one keep-alive connection) with the same token, path prefix, retries (a
    503, a connection dropped mid-body) and typed errors (410) as every other request."""
    schema = pa.schema([("seq", pa.int64())])
    seen: list[dict[str, str]] = []
    trouble = ["unavailable", "drop"]
    clients: set[Any] = set()
    served = [0]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        assert scope["path"].startswith("/base/v1/feeds/shop/changes"), scope["path"]
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        seen.append({**headers, "query": scope["query_string"].decode()})
        clients.add(scope["client"][1])
        if "after=0%2F99" in scope["query_string"].decode():
            body, status = json.dumps({"error": {"code": "cursor_expired", "message": "gone",
                                                 "oldest": "0/50"}}).encode(), 410
            out = [(b"content-type", b"application/json")]
        elif trouble:
            kind = trouble.pop(0)
            if kind == "unavailable":
                body, status, out = b'{"error": {"code": "unavailable", "message": "x"}}', 503, []
            else:  # promise a body, send part of it, and drop the connection
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-length", b"100000")]})
                await send({"type": "http.response.body", "body": b"x" * 10, "more_body": True})
                raise RuntimeError("connection dropped on purpose")
        else:
            served[0] += 1
            n = served[0]
            body, status = _ipc(pa.table({"seq": list(range(n * 1000, n * 1000 + 5000))},
                                         schema=schema)), 200
            out = [(b"pgfeed-next", f"0/{n}0".encode()), (b"pgfeed-has-more", b"true")]
        await send({"type": "http.response.start", "status": status,
                    "headers": [*out, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    with serve_app(app) as url, FeedClient(f"{url}/base", token="t0k", retry=FAST) as client:
        pages = list(client.iter_arrow_pages("shop", "earliest", "0/30", limit=5000))
        assert [p.num_rows for p in pages] == [5000, 5000, 5000]
        assert [p.next for p in pages] == ["0/10", "0/20", "0/30"]
        assert pa.Table.from_batches(pages[1].batches).column("seq").to_pylist() == list(range(2000, 7000))
        assert all(s["authorization"] == "Bearer t0k" for s in seen)
        assert all(s.get("accept-encoding") == "identity" for s in seen)  # http.client, not httpx
        assert len(seen) == 5  # the 503 and the dropped answer were retried
        assert len(clients) == 2  # a new connection after the drop only (keep-alive)
        with pytest.raises(CursorExpired) as expired:
            list(client.iter_arrow_pages("shop", "0/99", "0/100", limit=10))
        assert expired.value.oldest == "0/50"


def test_cursor_after_skips_n_changes_with_count_pages_sync_and_async() -> None:
    """``cursor_after`` walks ``format=count`` pages (never reading a change) to the cursor after
    the n-th change, stopping at ``to`` or the log's end; the async client does the same."""
    feed = FakeFeed()  # 5 transactions of 3 changes: 0/1000:0 .. 0/5000:2
    cases = [(("earliest", 4), {}, "0/2000:0"), (("earliest", 3), {}, "0/1000"),
             (("0/1000:1", 5), {}, "0/3000:0"), (("earliest", 100), {"to": "0/3000"}, "0/3000"),
             (("earliest", 100), {}, "0/5000"), (("0/2000", 0), {}, "0/2000")]
    with _client(feed) as client:
        for args, kw, want in cases:
            assert client.cursor_after("shop", *args, **kw) == want, (args, kw)
    counted = [r for r in feed.requests if r.url.params.get("format") == "count"]
    assert counted and len(counted) == len(feed.requests)  # no change was read

    async def main() -> list[str]:
        async with AsyncFeedClient("http://pgfeed.test", transport=httpx.MockTransport(feed),
                                   retry=FAST) as client:
            return [await client.cursor_after("shop", *args, **kw) for args, kw, _ in cases]

    assert asyncio.run(main()) == [want for _, _, want in cases]
