"""How a backfill combines what several publications say of one table, as PostgreSQL does
(pgoutput.c, tablesync.c): row filters ORed, none when one publication has none; column lists
united, every column when one has none."""

from __future__ import annotations

from pgfeed.backfill.source import effective


def test_one_publication_is_taken_as_it_is() -> None:
    assert effective([("(a > 1)", ["id", "a"])]) == ("(a > 1)", ["id", "a"])
    assert effective([(None, None)]) == (None, None)


def test_filters_are_ored_and_a_publication_without_one_removes_it() -> None:
    assert effective([("(a > 1)", None), ("(b = 'x')", None)])[0] == "((a > 1)) OR ((b = 'x'))"
    assert effective([("(a > 1)", None), ("(a > 1)", None)])[0] == "(a > 1)"  # the same, once
    assert effective([("(a > 1)", None), (None, None)])[0] is None


def test_column_lists_are_united_and_a_publication_without_one_publishes_every_column() -> None:
    assert effective([(None, ["id", "a"]), (None, ["id", "d"])])[1] == ["id", "a", "d"]
    assert effective([(None, ["id", "a"]), (None, None)])[1] is None
