"""toast=reselect against real PostgreSQL (15 and 18): an unchanged TOAST column is filled with
the value the row held at that position, the same for every reader (HTTP, gRPC, Spark typed),
whatever was read before, across a restart of the service."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from pgfeed_client import GrpcFeedClient, format_lsn, parse_cursor
from tests.fixtures.fix_pg import Clusters, create_database, drop_slots
from tests.fixtures.fix_service import FeedFactory, Service, run_service

pytestmark = pytest.mark.pg

Answer = tuple[str, int, Any, tuple[str, ...], tuple[str, ...] | None]  # op, id, body, unchanged, filled


def _big() -> str:
    return "".join(uuid.uuid4().hex for _ in range(300))  # 9.6 kB of random text: stored out of line


def create_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, n int NOT NULL, body text)")
        conn.execute("ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL")


def write_history(dsn: str) -> dict[tuple[int, int], str]:
    """Updates that leave the toasted body alone, with new bodies, a key change, a delete and a
    re-insert in between. Returns (statement number, id) -> the body the row holds after it, for
    each update that left body unchanged, in order (the statement number is only for reading)."""
    v1, v2, v3, w1, w2 = (_big() for _ in range(5))
    truth: dict[tuple[int, int], str] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO docs VALUES (1, 0, %s), (2, 0, %s)", (v1, w1))
        conn.execute("UPDATE docs SET n = n + 1")  # 1: v1, 2: w1
        truth.update({(1, 1): v1, (1, 2): w1})
        conn.execute("UPDATE docs SET body = %s WHERE id = 1", (v2,))
        conn.execute("UPDATE docs SET n = n + 1 WHERE id = 1")  # 1: v2
        truth[(2, 1)] = v2
        conn.execute("UPDATE docs SET body = %s WHERE id = 1", (v3,))
        conn.execute("UPDATE docs SET id = 3 WHERE id = 2")  # the key moves, w1 with it
        truth[(3, 3)] = w1
        conn.execute("UPDATE docs SET n = n + 1")  # 1: v3, 3: w1
        truth.update({(4, 1): v3, (4, 3): w1})
        conn.execute("DELETE FROM docs WHERE id = 3")
        conn.execute("INSERT INTO docs VALUES (3, 0, %s)", (w2,))
        conn.execute("UPDATE docs SET n = n + 1 WHERE id = 3")  # 3: w2, not w1
        truth[(5, 3)] = w2
    return truth


def http_answers(service: Service, feed: str, after: str = "earliest") -> dict[str, Answer]:
    """cursor "commit_lsn:seq" -> what HTTP serves there for rows of docs (pages of 2 changes, so
    pages end inside transactions)."""
    out: dict[str, Answer] = {}
    with httpx.Client(base_url=service.http_url, timeout=30) as client:
        while True:
            page = client.get(f"/v1/feeds/{feed}/changes",
                              params={"after": after, "limit": 2, "tables": "public.docs"}).json()
            for c in page["changes"]:
                row = c.get("after") or c["key"]
                filled = tuple(c["toast_filled"]) if "toast_filled" in c else None
                out[f"{c['commit_lsn']}:{c['seq']}"] = (c["op"], row["id"], row.get("body"),
                                                        tuple(c["unchanged_toast"]), filled)
            after = page["next"]
            if not page["has_more"]:
                return out


def grpc_answers(service: Service, feed: str, after: str, head: str) -> dict[str, Answer]:
    out: dict[str, Answer] = {}
    with GrpcFeedClient(service.grpc_target) as client:
        for txn in client.subscribe(feed, after, tables=["public.docs"]):
            for c in txn.changes:
                row = c.after or c.key or {}
                filled = tuple(c.toast_filled) if c.toast_filled is not None else None
                out[f"{c.commit_lsn}:{c.seq}"] = (c.op, row["id"], row.get("body"),
                                                  tuple(c.unchanged_toast), filled)
            if parse_cursor(txn.cursor or "0/0").lsn >= parse_cursor(head).lsn:
                return out
    raise AssertionError("the stream ended")


def check_truth(answers: dict[str, Answer], truth: dict[tuple[int, int], str]) -> None:
    """The updates that left body unchanged carry, in order, exactly the bodies ``truth`` lists."""
    toasted = [(a[1], a[2], a[4]) for _, a in sorted(answers.items(), key=lambda kv: parse_cursor(kv[0]).sort_key)
               if a[0] == "update" and a[3] == ("body",)]
    assert [(i, body) for i, body, _ in toasted] == [(i, body) for (_, i), body in truth.items()]
    assert all(filled == ("body",) for _, _, filled in toasted)


def _after(answers: dict[str, Answer], cursor: str) -> dict[str, Answer]:
    """What a reader resuming from ``cursor`` is owed."""
    at = parse_cursor(cursor).sort_key
    return {k: a for k, a in answers.items() if parse_cursor(k).sort_key > at}


def _before(cursor: str) -> str:
    """The cursor whose next change is the one ``cursor`` names (same transaction, or right
    before it: a commit LSN minus one names no transaction)."""
    c = parse_cursor(cursor)
    if c.seq:
        return f"{format_lsn(c.lsn)}:{c.seq - 1}"
    return format_lsn(c.lsn - 1)


def test_every_reader_gets_the_same_fill_for_a_position_across_a_restart(tmp_path: Path,
                                                                          pg_dsn: str) -> None:
    data_dir = tmp_path / "svc"
    create_table(pg_dsn)
    with run_service(data_dir) as first:
        feeds = FeedFactory(first)
        name = feeds(pg_dsn, tables=("public.docs",), toast="reselect")
        truth = write_history(pg_dsn)
        feeds.caught_up(name, pg_dsn)
        everything = http_answers(first, name)  # reader A: everything, from the start
        check_truth(everything, truth)
        toasted = [k for k, a in everything.items() if a[0] == "update" and a[3] == ("body",)]
        # Reader B starts at the third one (body v2 there, v3 later), after A read everything.
        middle = _before(toasted[2])
        head = max(everything, key=lambda k: parse_cursor(k).sort_key)
        assert grpc_answers(first, name, middle, head) == _after(everything, middle)
        assert http_answers(first, name, middle) == _after(everything, middle)
    with run_service(data_dir) as second:  # a new process over the same data dir
        try:
            # B first this time, nothing read before it; then A from the last one, then all.
            assert grpc_answers(second, name, middle, head) == _after(everything, middle)
            last = _before(toasted[-1])
            assert http_answers(second, name, last) == _after(everything, last)
            assert http_answers(second, name) == everything
        finally:
            FeedFactory(second, created=[name]).delete_all()


def test_caught_up_readers_get_the_fill_from_the_shared_tail(make_served_feed: FeedFactory,
                                                             pg_dsn: str) -> None:
    """Unfiltered readers waiting at the head are served from the feed's shared live tail; its
    reader takes fills from the same index, so they get the value too."""
    create_table(pg_dsn)
    name = make_served_feed(pg_dsn, tables=("public.docs",), toast="reselect")
    body = _big()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO docs VALUES (1, 0, %s)", (body,))
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    head = httpx.get(f"{service.http_url}/v1/feeds/{name}/changes",
                     params={"after": "latest"}, timeout=30).json()["next"]
    got: dict[str, Any] = {}

    def long_poll(key: str) -> None:
        got[key] = httpx.get(f"{service.http_url}/v1/feeds/{name}/changes",
                             params={"after": head, "wait": 30}, timeout=60).json()["changes"]

    def stream() -> None:
        with GrpcFeedClient(service.grpc_target) as client:
            got["grpc"] = next(iter(client.subscribe(name, head))).changes

    threads = [threading.Thread(target=long_poll, args=(f"http{i}",)) for i in range(2)]
    threads.append(threading.Thread(target=stream))
    for t in threads:
        t.start()
    time.sleep(1)  # all waiting at the head
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE docs SET n = n + 1")
    for t in threads:
        t.join(60)
    for key in ("http0", "http1"):
        (change,) = got[key]
        assert change["after"]["body"] == body and change["toast_filled"] == ["body"], key
    (change,) = got["grpc"]
    assert change.after["body"] == body and change.toast_filled == ["body"]
    assert make_served_feed.service.supervisor.tail(name).slices_served > 0


def test_a_forced_trim_keeps_the_fills_of_what_remains(make_served_feed: FeedFactory,
                                                       pg_dsn: str) -> None:
    """Nothing was read before an admin trims the log past the images the later fills need:
    the index takes them in first, so a reader from `earliest` still gets every value."""
    create_table(pg_dsn)
    name = make_served_feed(pg_dsn, tables=("public.docs",), toast="reselect")
    truth = write_history(pg_dsn)
    make_served_feed.caught_up(name, pg_dsn)
    service = make_served_feed.service
    with httpx.Client(base_url=service.http_url, timeout=30) as client:
        page = client.get(f"/v1/feeds/{name}/transactions", params={"limit": 1000}).json()
        commits = [t["commit_lsn"] for t in page["transactions"]]
        # Keep the last five transactions, from the key change on: the images of v3 and w1
        # (the insert and the update that wrote them) are trimmed, the fills that need them kept.
        cut = commits[-6]
        trimmed = client.post(f"/v1/feeds/{name}/trim", json={"before": cut})
        assert trimmed.status_code == 200 and trimmed.json()["dropped"] == len(commits) - 5
    kept = http_answers(service, name)
    assert min(parse_cursor(k).lsn for k in kept) > parse_cursor(cut).lsn
    toasted = [(a[1], a[2], a[4]) for _, a in sorted(kept.items(), key=lambda kv: parse_cursor(kv[0]).sort_key)
               if a[0] == "update" and a[3] == ("body",)]
    assert toasted == [(i, body, ("body",)) for (_, i), body in list(truth.items())[-4:]]


@pytest.mark.spark
@pytest.mark.slow
def test_a_spark_typed_read_after_a_restart_gets_the_same_values(
        tmp_path: Path, pg_clusters: Clusters, request: pytest.FixtureRequest) -> None:
    """Spark reads from a late cursor first thing in a new process: the values are the ones
    HTTP served before the restart."""
    cluster = pg_clusters.newest()
    dsn = create_database(cluster, prefix="toast")
    data_dir = tmp_path / "svc"
    create_table(dsn)
    try:
        with run_service(data_dir) as first:
            name = FeedFactory(first)(dsn, tables=("public.docs",), toast="reselect")
            truth = write_history(dsn)
            FeedFactory(first).caught_up(name, dsn)
            everything = http_answers(first, name)
            check_truth(everything, truth)
        toasted = [k for k, a in everything.items() if a[0] == "update" and a[3] == ("body",)]
        middle = _before(toasted[2])
        with run_service(data_dir) as second:
            try:
                spark = request.getfixturevalue("spark_session")  # started only now: ~15 s
                df = (spark.read.format("pgfeed").option("url", second.http_url)
                      .option("feed", name).option("table", "public.docs").option("from", middle)
                      .option("partitions", 2).load())
                got = {f"{format_lsn(r['_commit_lsn'])}:{r['_seq']}":
                       (r["_op"], r["id"], r["body"], tuple(r["_unchanged_toast"]))
                       for r in df.collect()}
                owed = _after(everything, middle)
                assert got == {k: (a[0], a[1], a[2] if a[0] != "delete" else None, a[3])
                               for k, a in owed.items()}
                assert sum(1 for a in got.values() if a[3] == ("body",)) == len(toasted) - 2
            finally:
                FeedFactory(second, created=[name]).delete_all()
    finally:
        drop_slots(cluster, dsn)
