"""The one lazy form of a read: row changes as runs of stored frames, loaded only on demand.

A decoded transaction (``changes.TransactionDecoder.decode``) holds ``Change``s for what is not a
row (messages, truncates, DDL events) and, for rows, ``RowRun``s: consecutive row frames of one
relation version that the read's filters keep, as the payload's buffer and the frames' bounds.
Every encoder consumes the same runs: the compiled ones write a whole run in one call straight
from the frames (``encoding.transcode``, ``encoding.arrow_rows``), and anything they refuse, or
an encoder without a compiled twin, loads the changes here (``RowRun.load``, ``loaded``). What an
encoder needs to know about the rows (the table's shape, its key and json columns, the version)
travels with the run, in its ``RelationPlan``; how values load (the feed's toast option) in its
``RowLoading``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, final

from pgfeed.assembler.framing import walk
from pgfeed.decoding.model import Change, Op, Transaction
from pgfeed.decoding.plan import RelationPlan, WireRow
from pgfeed.decoding.values import RowLoader
from pgfeed.errors import SchemaError
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import (
    TAG_INSERT,
    TAG_UPDATE,
    UNCHANGED_TOAST,
    DeleteMessage,
    InsertMessage,
    UpdateMessage,
)
from pgfeed.pgoutput.messages import TUPLE_KEY as _KEY
from pgfeed.pgoutput.messages import TUPLE_NEW as _NEW
from pgfeed.pgoutput.messages import TUPLE_OLD as _OLD_ROW
from pgfeed.types.json import JsonText
from pgfeed_client._cursor import format_lsn

__all__ = ["DEFAULT_PLACEHOLDER", "Fills", "Read", "RowLoading", "RowRun", "ToastMode",
           "change_total", "loaded"]

ToastMode = Literal["omit", "placeholder", "reselect"]
DEFAULT_PLACEHOLDER = "__pgfeed_unchanged_toast__"
# toast=reselect: (commit_lsn, seq) -> {column: (value oid, text)} the feed's fill index holds for
# that change (``feeds.toastindex``), empty when it filled nothing there.
Fills = Callable[[int, int], Mapping[str, tuple[int, str | None]]]

_UT = UNCHANGED_TOAST
_ROW_OPS = {TAG_INSERT: Op.INSERT, TAG_UPDATE: Op.UPDATE, ord("D"): Op.DELETE}


@dataclass(frozen=True, slots=True)
class RowLoading:
    """How a feed's row values load (its ``toast`` option): unchanged TOAST columns are left
    out (``omit``), set to ``placeholder``, or taken from ``fills`` (``reselect``)."""

    toast: ToastMode = "omit"
    placeholder: str = DEFAULT_PLACEHOLDER
    fills: Fills | None = None

    def __post_init__(self) -> None:
        if self.toast not in ("omit", "placeholder", "reselect"):
            raise ValueError(f"toast must be omit, placeholder or reselect, not {self.toast!r}")


@final  # encoders test ``type(c) is RowRun``
class RowRun:
    """``count`` consecutive row changes (seq ``first_seq`` on) of one relation version
    (``plan``), still in wire form: the frames ``payload[start:end]`` of transaction
    ``commit_lsn``. ``read``: a backfill's rows (its Insert frames are op "read")."""

    __slots__ = ("commit_lsn", "count", "end", "first_seq", "loading", "payload", "plan", "read",
                 "start")

    def __init__(self, payload: bytes | bytearray, start: int, end: int, first_seq: int,
                 count: int, plan: RelationPlan, read: bool, commit_lsn: int,
                 loading: RowLoading) -> None:
        self.payload = payload
        self.start = start
        self.end = end
        self.first_seq = first_seq
        self.count = count
        self.plan = plan
        self.read = read
        self.commit_lsn = commit_lsn
        self.loading = loading

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.count - 1

    def __repr__(self) -> str:
        return (f"RowRun({self.plan.name} v{self.plan.schema.version}, seq {self.first_seq}.."
                f"{self.last_seq} of {format_lsn(self.commit_lsn)})")

    def frames(self) -> Iterator[tuple[int, int, int, int, int]]:
        """``(seq, lsn, at, message start, message stop)`` of each frame of the run."""
        seq = self.first_seq
        for at, lsn, begin, stop in walk(self.payload, self.start, self.end):
            yield seq, lsn, at, begin, stop
            seq += 1

    def first(self, count: int) -> RowRun:
        """The first ``count`` rows of the run, a run of their own (a page cut inside it)."""
        end = self.start
        for n, (_at, _lsn, _begin, stop) in enumerate(walk(self.payload, self.start, self.end), 1):
            end = stop
            if n == count:
                break
        return RowRun(self.payload, self.start, end, self.first_seq, count, self.plan, self.read,
                      self.commit_lsn, self.loading)

    def load(self) -> list[Change]:
        """Every change of the run, decoded (SchemaError when bytes do not fit the version)."""
        payload, plan, loading, commit_lsn, read = (self.payload, self.plan, self.loading,
                                                    self.commit_lsn, self.read)
        out: list[Change] = []
        append = out.append
        seq = self.first_seq
        for _at, lsn, begin, stop in walk(payload, self.start, self.end):
            append(load_row(loading, payload[begin:stop], plan, lsn, seq, commit_lsn, read))
            seq += 1
        return out

    def load_at(self, at: int, seq: int) -> tuple[Change, int]:
        """Change ``seq``, whose frame starts at ``at`` (where a compiled encoder stopped),
        decoded, and the offset of the frame after it."""
        for _at, lsn, begin, stop in walk(self.payload, at, self.end):
            return load_row(self.loading, self.payload[begin:stop], self.plan, lsn, seq,
                            self.commit_lsn, self.read), stop
        raise ValueError(f"{self!r} has no frame at {at}")


# What a decoded transaction holds: changes, and runs of row changes in wire form.
Read: TypeAlias = Change | RowRun


def loaded(txn: Transaction[Read]) -> Transaction[Change]:
    """``txn`` with its runs decoded: the reference form, for encoders without a compiled twin
    (Debezium, the generic Arrow read, the CLI) and for tests."""
    changes: list[Change] = []
    for c in txn.changes:
        if type(c) is RowRun:
            changes.extend(c.load())
        else:
            changes.append(c)
    return txn.with_changes(changes)


def change_total(changes: Sequence[Read]) -> int:
    """How many changes ``changes`` holds (a run counts its rows)."""
    return sum(c.count if type(c) is RowRun else 1 for c in changes)


# -- loading one row change ------------------------------------------------------------------------

Rows = tuple[dict[str, Any] | None, dict[str, Any] | None, int | None]  # new, old, old kind


def _fast_rows(tag: int, data: bytes | bytearray, wire_row: WireRow) -> Rows:
    """Insert/Update/Delete bytes -> loaded (new, old, old kind); raises unless every column is
    text or NULL, the layout is exactly right and every value loads."""
    marker = data[5]
    new = old = old_kind = None
    if tag == TAG_INSERT:
        if marker != _NEW:
            raise ValueError("no new tuple")
        new, pos = wire_row(data, 6)
    elif tag == TAG_UPDATE:
        if marker == _NEW:
            new, pos = wire_row(data, 6)
        elif marker == _KEY or marker == _OLD_ROW:
            old_kind = marker
            old, pos = wire_row(data, 6)
            if data[pos] != _NEW:
                raise ValueError("no new tuple")
            new, pos = wire_row(data, pos + 1)
        else:
            raise ValueError("bad marker")
    else:
        if marker != _KEY and marker != _OLD_ROW:
            raise ValueError("bad marker")
        old_kind = marker
        old, pos = wire_row(data, 6)
    if pos != len(data):
        raise ValueError("trailing bytes")
    return new, old, old_kind


def _slow_rows(msg: InsertMessage | UpdateMessage | DeleteMessage, load: RowLoader,
               new_values: tuple[Any, ...] | None = None) -> tuple[
                   dict[str, Any] | None, dict[str, Any] | None, bool, int | None]:
    """The reference path: decoded TupleData through ``row_loader`` (TOAST, binary, fallbacks);
    ``new_values`` stand in for the new tuple's values (unchanged TOAST filled)."""
    new = old = None
    old_toast = False
    old_kind = None
    if not isinstance(msg, DeleteMessage):
        new = load(msg.new_tuple.values if new_values is None else new_values)
    if not isinstance(msg, InsertMessage) and msg.old_tuple is not None:
        values = msg.old_tuple.values
        old, old_toast, old_kind = load(values), _UT in values, msg.old_kind
    return new, old, old_toast, old_kind


def _fill(values: tuple[Any, ...], plan: RelationPlan,
          fills: Mapping[str, tuple[int, str | None]]) -> tuple[tuple[Any, ...] | None, list[str]]:
    """``values`` with unchanged TOAST columns replaced by the fill index's text for them (when
    the value type is still the column's; None when nothing was), and the names filled."""
    out = list(values)
    filled = []
    names, oids = plan.column_names, plan.value_oids
    for i, v in enumerate(values):
        if v is _UT and i < len(names):
            held = fills.get(names[i])
            if held is not None and held[0] == oids[i]:
                out[i] = held[1]
                filled.append(names[i])
    return (tuple(out) if filled else None), filled


def _json_nulls(change: Change, columns: frozenset[str]) -> dict[str, list[str]] | None:
    """Per image of ``change``, the json/jsonb ``columns`` holding the JSON document ``null``
    (``JsonText("null")``, where SQL NULL is None): what a JSON event cannot say in the value."""
    found: dict[str, list[str]] | None = None
    for image, row in (("key", change.key), ("before", change.before), ("after", change.after)):
        if not row:
            continue
        names = [n for n in columns if _is_json_null(row.get(n))]
        if names:
            if found is None:
                found = {}
            found[image] = sorted(names)
    return found


def _is_json_null(value: Any) -> bool:
    return type(value) is JsonText and value.text == "null"


def load_row(loading: RowLoading, buf: bytes | bytearray, plan: RelationPlan, lsn: int, seq: int,
             commit_lsn: int, read: bool = False) -> Change:
    """One Insert/Update/Delete message of relation version ``plan`` as a served Change, per the
    change event contract (``changes.TransactionDecoder`` has the rules); ``read``: a backfill's
    Insert, op "read". SchemaError when the bytes do not fit the version."""
    tag = buf[0]
    toast: list[str] = []
    filled: list[str] | None = None
    try:  # wire bytes straight to values: rows of only 't'/'n' columns (nearly all of them)
        after, old, old_kind = _fast_rows(tag, buf, plan.wire_row)
        old_toast = False
    except Exception:  # noqa: BLE001 - anything unusual: the reference path below decides
        msg = decode(buf)
        assert isinstance(msg, (InsertMessage, UpdateMessage, DeleteMessage))
        new_values = None
        if not isinstance(msg, DeleteMessage) and _UT in msg.new_tuple.values:
            values = msg.new_tuple.values
            names = plan.column_names
            toast = [names[i] for i, v in enumerate(values) if v is _UT and i < len(names)]
            if loading.toast == "reselect":
                fills = loading.fills(commit_lsn, seq) if loading.fills is not None else None
                new_values, filled = _fill(values, plan, fills) if fills else (None, [])
        try:
            after, old, old_toast, old_kind = _slow_rows(msg, plan.load, new_values)
        except ValueError as exc:
            raise SchemaError(f"{_ROW_OPS[tag].value} at {format_lsn(lsn)} (transaction "
                              f"{format_lsn(commit_lsn)}, seq {seq}) does not fit "
                              f"{plan.name} version {plan.schema.version}: {exc}") from None
    if old_toast and old is not None:  # an old image without the value: unknown, dropped
        old = {k: v for k, v in old.items() if v is not _UT}
    if tag == TAG_INSERT:
        assert after is not None
        change = _insert(after, toast, plan, lsn, seq)
        if read:
            change.op = Op.READ
    elif tag == TAG_UPDATE:
        assert after is not None
        change = _update(after, toast, old, old_kind, plan, lsn, seq)
    else:
        assert old is not None
        change = _delete(old, old_kind, plan, lsn, seq)
    change.table_version = plan.schema.version
    if toast:
        _unchanged_toast(loading, change, filled)
    if plan.json_columns:
        change.json_null = _json_nulls(change, plan.json_columns)
    return change


def _insert(after: dict[str, Any], toast: list[str], plan: RelationPlan, lsn: int,
            seq: int) -> Change:
    key = plan.key_of(after)
    schema = plan.schema
    if not toast:
        return Change(lsn, seq, Op.INSERT, schema.schema, schema.table, key, None, after)
    if key is not None:
        key = {k: v for k, v in key.items() if v is not _UT}
    return Change(lsn, seq, Op.INSERT, schema.schema, schema.table, key, None, after, toast)


def _update(after: dict[str, Any], toast: list[str], old: dict[str, Any] | None,
            old_kind: int | None, plan: RelationPlan, lsn: int, seq: int) -> Change:
    key_names = plan.key_names
    before = None
    if old is None:
        key = plan.key_of(after)
    else:
        if old_kind == _OLD_ROW:
            before = old
        key = {k: old[k] for k in key_names if k in old} if key_names else None
    if toast and key is not None and old is None:
        key = {k: v for k, v in key.items() if v is not _UT}
    schema = plan.schema
    return Change(lsn, seq, Op.UPDATE, schema.schema, schema.table, key, before, after, toast)


def _delete(old: dict[str, Any], old_kind: int | None, plan: RelationPlan, lsn: int,
            seq: int) -> Change:
    key_names = plan.key_names
    key = {k: old[k] for k in key_names if k in old} if key_names else None
    before = old if old_kind == _OLD_ROW else None
    schema = plan.schema
    return Change(lsn, seq, Op.DELETE, schema.schema, schema.table, key, before)


def _unchanged_toast(loading: RowLoading, change: Change, filled: list[str] | None) -> None:
    """Apply the toast mode to ``after``: ``filled`` are the columns the fill index gave."""
    after = change.after
    assert after is not None
    if loading.toast == "placeholder":
        for name in change.unchanged_toast:
            after[name] = loading.placeholder
        return
    for name in change.unchanged_toast:
        if after.get(name) is _UT:
            del after[name]
    if loading.toast == "reselect":
        change.toast_filled = filled or []
