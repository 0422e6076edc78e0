"""A table written with every change a mirror must get right, with the source's content recorded
at chosen positions: inserts, TOAST-only updates (a large incompressible text kept while another
column changes, REPLICA IDENTITY DEFAULT), key changes (some leaving the TOAST value unchanged),
deletes, a truncate and a backfill (``POST /v1/feeds/{feed}/backfills``) racing writes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from pgfeed_client import FeedClient
from tests.fixtures.fix_service import wait_until

# ~4.8 kB of hex digits: pglz cannot shrink it under the 2 kB threshold, so it is stored out of
# line and an UPDATE that leaves it alone sends it as unchanged TOAST ('u').
BIG = "(SELECT string_agg(md5({seed} || '-' || k), '') FROM generate_series(1, 150) k)"


@dataclass(frozen=True)
class Snapshot:
    """``SELECT *`` (sorted) and the WAL position right after it: every change up to it has a
    commit position below ``lsn``, every later one above."""

    lsn: int
    rows: list[tuple[Any, ...]]


def snapshot(conn: psycopg.Connection[Any], table: sql.Identifier) -> Snapshot:
    rows = sorted(conn.execute(sql.SQL("SELECT * FROM {}").format(table)).fetchall())
    lsn = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert lsn is not None
    return Snapshot(int(lsn[0]), rows)


def run(dsn: str, name: str, base_url: str, feed: str) -> list[Snapshot]:
    """The workload on ``public.<name>``: three snapshots in its course, then the final one."""
    t = sql.Identifier(name)
    big = sql.SQL(BIG.format(seed="'r' || id"))
    shots: list[Snapshot] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        def x(query: str, *params: Any, **parts: Any) -> None:
            conn.execute(sql.SQL(query).format(t=t, **parts), params or None)

        x("CREATE TABLE {t} (id int PRIMARY KEY, v text, n int, big text)")
        x("INSERT INTO {t} SELECT g, 'v' || g, g, " + BIG.format(seed="g::text")
          + " FROM generate_series(1, 60) g")
        x("UPDATE {t} SET n = n + 100 WHERE id % 3 = 0")             # TOAST-only
        x("UPDATE {t} SET n = n + 1, v = 'again' WHERE id % 6 = 0")  # ... on the same rows again
        x("UPDATE {t} SET id = id + 1000 WHERE id BETWEEN 50 AND 55")  # key changes, big kept
        x("UPDATE {t} SET n = -n WHERE id BETWEEN 1050 AND 1052")     # TOAST-only on new keys
        x("DELETE FROM {t} WHERE id % 7 = 0")
        with conn.transaction():  # a key swap through a temporary key, big kept
            x("UPDATE {t} SET id = -1 WHERE id = 1")
            x("UPDATE {t} SET id = 1 WHERE id = 2")
            x("UPDATE {t} SET id = 2 WHERE id = -1")
        shots.append(snapshot(conn, t))
        x("UPDATE {t} SET big = {b}, v = 'rewritten' WHERE id % 5 = 0", b=big)  # big changed
        x("UPDATE {t} SET n = 0 WHERE id % 5 = 0")                     # then TOAST-only
        x("TRUNCATE {t}")
        x("INSERT INTO {t} SELECT g, 'w' || g, g, " + BIG.format(seed="'w' || g")
          + " FROM generate_series(1, 40) g")
        x("UPDATE {t} SET n = n * 10 WHERE id % 4 = 0")               # TOAST-only
        shots.append(snapshot(conn, t))
        with FeedClient(base_url) as client:
            backfill = client.start_backfill(feed, [f"public.{name}"], chunk_rows=7, parallel=2)
            for i in range(1, 40, 3):  # writes racing the chunks
                x("UPDATE {t} SET n = n + 1 WHERE id = %s", i)               # TOAST-only
                x("UPDATE {t} SET id = id + 500 WHERE id = %s", i + 1)       # key change
                x("DELETE FROM {t} WHERE id = %s", i + 2)
                x("INSERT INTO {t} VALUES (%s, 'new', 0, 'small')", 900 + i)
            wait_until(lambda: client.backfill(feed, backfill["id"])["state"] != "running", 120,
                       "the backfill")
            assert client.backfill(feed, backfill["id"])["state"] == "done"
        shots.append(snapshot(conn, t))
        x("UPDATE {t} SET v = 'last' WHERE id % 2 = 0")                # TOAST-only
        x("UPDATE {t} SET id = id + 2000 WHERE id BETWEEN 500 AND 520")  # key changes
        x("DELETE FROM {t} WHERE id > 930")
        shots.append(snapshot(conn, t))
    return shots
