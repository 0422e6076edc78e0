"""The ``orders`` workload the capture, decode, streaming and Spark benchmarks share: 1,000,000
changes (400k insert, 400k update, 200k delete) in transactions of 10k rows."""

from __future__ import annotations

INSERTS, UPDATES, DELETES, PER_TXN = 400_000, 400_000, 200_000, 10_000
SCHEMA = """
CREATE TABLE orders (
    id          bigint PRIMARY KEY,
    customer    text NOT NULL,
    amount      numeric(12,2) NOT NULL,
    status      text NOT NULL,
    note        text,
    created_at  timestamptz NOT NULL
);
CREATE PUBLICATION pub FOR TABLE orders;
"""
INSERT_SQL = (
    "INSERT INTO orders SELECT g, 'customer-' || lpad(g::text, 8, '0'), "
    "(g %% 100000) / 100.0, 'new', CASE WHEN g %% 7 = 0 THEN NULL "
    "ELSE 'note for order ' || g END, "
    "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second' "
    "FROM generate_series(%s::bigint, %s::bigint) g")
UPDATE_SQL = "UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id BETWEEN %s AND %s"
DELETE_SQL = "DELETE FROM orders WHERE id BETWEEN %s AND %s"


def steps(scale: float = 1.0) -> list[tuple[str, int, int]]:
    """The workload's statements in order, each ``(sql, first id, last id)`` and meant as a
    transaction of its own; ``scale`` shrinks the counts (and a transaction, below 1.0)."""
    per = max(1, int(PER_TXN * min(scale, 1.0)))
    ins, upd, dele = (max(per, int(n * scale)) for n in (INSERTS, UPDATES, DELETES))
    return ([(INSERT_SQL, lo, lo + per - 1) for lo in range(1, ins + 1, per)]
            + [(UPDATE_SQL, lo, lo + per - 1) for lo in range(1, upd + 1, per)]
            + [(DELETE_SQL, lo, lo + per - 1) for lo in range(1, dele + 1, per)])
