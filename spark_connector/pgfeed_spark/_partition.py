"""LsnRange: the picklable InputPartition of a read, the changes in ``(after, to]``."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from pyspark.sql.datasource import InputPartition

from pgfeed_client import Cursor, parse_cursor

__all__ = ["LsnRange", "plan_ranges"]


class LsnRange(InputPartition):
    """Changes after cursor ``after`` up to and including cursor ``to`` (PostgreSQL text form)."""

    def __init__(self, index: int, after: str, to: str) -> None:
        super().__init__((index, after, to))
        self.index = index
        self.after = after
        self.to = to

    def __repr__(self) -> str:
        return f"LsnRange({self.index}, after={self.after!r}, to={self.to!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LsnRange) and (self.index, self.after, self.to) == (
            other.index, other.after, other.to)

    def __hash__(self) -> int:
        return hash((self.index, self.after, self.to))


def _key(cursor: str) -> Cursor:
    parsed = parse_cursor(cursor)
    if parsed == "latest":
        raise ValueError("'latest' must be resolved to the head before planning partitions")
    return parsed


def plan_ranges(after: str, to: str, boundaries: Sequence[str]) -> list[LsnRange]:
    """Cut ``(after, to]`` at the boundaries strictly inside it (from ``/splits``)."""
    lo, hi = _key(after), _key(to)
    if lo >= hi:
        return []
    inner = sorted({_key(b) for b in boundaries if lo < _key(b) < hi})
    points = [after, *(str(c) for c in inner), to]
    return [LsnRange(i, a, b) for i, (a, b) in enumerate(pairwise(points))]
