"""Random append/trim/retain/consumer sequences against a plain model of the contract."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgfeed.changelog import KINDS, open_changelog
from pgfeed.changelog.base import ChangeLog
from pgfeed.errors import RetentionError
from pgfeed_client._cursor import EARLIEST, Cursor
from tests.unit.changelog.txns import SECOND, lsns, txn

L = 1000
HOUR = 3600 * SECOND
NOW = 10 * HOUR


@dataclass
class Model:
    """The contract stated as directly as possible: lists, no running totals, no bisect."""

    txns: list[tuple[int, int, int, int]] = field(default_factory=list)  # lsn, changes, bytes, ts
    head: int = 0
    confirmed: int = 0
    trimmed: int = 0
    forced: int = 0
    consumers: dict[str, Cursor] = field(default_factory=dict)

    def acked(self, lsn: int, changes: int) -> bool:
        return all(c.includes(lsn, changes - 1) for c in self.consumers.values())

    def drop(self, count: int, force: bool) -> int:
        dropped = self.txns[:count]
        if not force:
            while dropped and not all(self.acked(t[0], t[1]) for t in dropped):
                dropped.pop()
        forced = force and not all(self.acked(t[0], t[1]) for t in dropped)
        del self.txns[:len(dropped)]
        if dropped:
            self.trimmed = max(self.trimmed, dropped[-1][0])
        if forced:  # counted, and the consumers it overtook are gone
            self.forced += 1
            self.consumers = {n: c for n, c in self.consumers.items() if c >= Cursor(self.trimmed)}
        return len(dropped)

    def trim(self, before: int, force: bool) -> int:
        return self.drop(sum(1 for t in self.txns if t[0] < before), force)

    def retain(self, hours: float | None, max_bytes: int | None) -> int:
        count = 0
        if hours is not None:
            while count < len(self.txns) and self.txns[count][3] < NOW - hours * HOUR:
                count += 1
        if max_bytes is not None:
            while sum(t[2] for t in self.txns[count:]) > max_bytes:
                count += 1
        return self.drop(count, force=False)


lsn_sets = st.lists(st.integers(1, 24), min_size=0, max_size=4, unique=True).map(sorted)
ops = st.one_of(
    st.tuples(st.just("append"), lsn_sets, st.lists(st.integers(0, 3), min_size=4, max_size=4),
              st.lists(st.integers(0, 10), min_size=4, max_size=4), st.none() | st.integers(0, 50)),
    st.tuples(st.just("trim"), st.integers(0, 16), st.booleans()),
    st.tuples(st.just("consumer"), st.sampled_from(["a", "b"]), st.integers(0, 14),
              st.none() | st.integers(0, 3)),
    st.tuples(st.just("retain"), st.sampled_from([None, 0.0, 2.5, 7.0]),
              st.none() | st.tuples(st.sampled_from(["fixed"]), st.sampled_from([0, 150, 500]))
              | st.tuples(st.just("newest"), st.integers(1, 4))),
    st.tuples(st.just("confirm"), st.integers(0, 50)),
)


def apply(log: ChangeLog, model: Model, op: tuple) -> None:  # type: ignore[type-arg]
    kind, *args = op
    if kind == "append":
        numbers, counts, hours, confirm = args
        batch = [txn(n * L, counts[i], ts=hours[i] * HOUR) for i, n in enumerate(numbers)]
        log.append(batch, confirmed_lsn=None if confirm is None else confirm * L)
        for t in batch:
            if t.commit_lsn > model.head:
                model.txns.append((t.commit_lsn, t.change_count, len(t.payload), t.commit_ts))
                model.head = t.commit_lsn
        if confirm is not None:
            model.confirmed = max(model.confirmed, confirm * L)
    elif kind == "trim":
        before, force = args
        assert log.trim(before * L, force=force) == model.trim(before * L, force)
    elif kind == "consumer":
        name, number, seq = args
        cursor = Cursor(number * L, seq)
        if name not in model.consumers and cursor < Cursor(model.trimmed):
            with pytest.raises(RetentionError):  # never created below what was dropped
                log.set_consumer(name, cursor)
            return
        log.set_consumer(name, cursor)
        if name not in model.consumers or cursor > model.consumers[name]:
            model.consumers[name] = cursor
    elif kind == "retain":
        hours, budget = args
        max_bytes = None
        if budget is not None:  # a fixed byte budget, or exactly what the newest k transactions hold
            how, n = budget
            max_bytes = n if how == "fixed" else sum(t[2] for t in model.txns[-n:])
        assert log.retain(hours, max_bytes, NOW) == model.retain(hours, max_bytes)
    else:
        log.set_confirmed_lsn(args[0] * L)
        model.confirmed = max(model.confirmed, args[0] * L)


def expected_read(model: Model, cursor: Cursor, limit: int) -> list[int]:
    """The transactions still holding changes past ``cursor``, cut once ``limit`` are taken."""
    out, taken = [], 0
    for lsn, changes, _, _ in model.txns:
        if lsn < cursor.lsn or (lsn == cursor.lsn and cursor.seq is None):
            continue
        left = changes - (cursor.seq + 1 if lsn == cursor.lsn and cursor.seq is not None else 0)
        if lsn == cursor.lsn and left <= 0:
            continue
        out.append(lsn)
        taken += left
        if taken >= limit:
            break
    return out


def check(log: ChangeLog, model: Model, limit: int) -> None:
    stored = log.read(EARLIEST, 10**9)
    assert [(t.commit_lsn, t.change_count) for t in stored] == [t[:2] for t in model.txns]
    assert (log.head(), log.confirmed_lsn(), log.trimmed_lsn()) == (model.head, model.confirmed, model.trimmed)
    assert log.oldest() == (model.txns[0][0] if model.txns else 0)
    stats = log.stats()
    assert (stats.transaction_count, stats.change_count, stats.payload_bytes, stats.forced_trims) == (
        len(model.txns), sum(t[1] for t in model.txns), sum(t[2] for t in model.txns), model.forced)
    assert log.consumers() == model.consumers
    cursors = [EARLIEST, Cursor(model.head, 0)]
    for lsn, changes, _, _ in model.txns[:2] + model.txns[-3:]:
        cursors += [Cursor(lsn), Cursor(lsn - 1), Cursor(lsn, 0), Cursor(lsn, max(changes - 1, 0)),
                    Cursor(lsn, max(changes - 2, 0))]
    for cursor in cursors:
        assert lsns(log.read(cursor, limit)) == expected_read(model, cursor, limit), cursor
    bounds = log.split_points(0, model.head, 3)
    assert bounds[0] == 0 and bounds[-1] == model.head and bounds == sorted(set(bounds))
    assert set(bounds[1:-1]) <= {t[0] for t in model.txns}


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None, derandomize=True)
@given(first=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10)), min_size=2, max_size=10),
       script=st.lists(ops, min_size=1, max_size=12), limit=st.integers(1, 8))
def test_store_matches_the_model(kind: str, first: list[tuple[int, int]],
                                 script: list[tuple], limit: int) -> None:  # type: ignore[type-arg]
    """``first`` fills the log (changes and age of each transaction) so trims have material."""
    with tempfile.TemporaryDirectory() as tmp:
        log = open_changelog(kind, Path(tmp) / "changelog.db")
        model = Model()
        try:
            initial = [txn(i * L, changes, ts=hours * HOUR) for i, (changes, hours) in enumerate(first, 1)]
            log.append(initial)
            model.txns = [(t.commit_lsn, t.change_count, len(t.payload), t.commit_ts) for t in initial]
            model.head = initial[-1].commit_lsn
            for op in script:
                apply(log, model, op)
                check(log, model, limit)
        finally:
            log.close()
