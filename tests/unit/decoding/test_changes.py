"""TransactionDecoder: stored wire-form transactions -> contract Changes; RelationCatalog versions."""

from __future__ import annotations

from decimal import Decimal

import pytest

from pgfeed.assembler.framing import frame
from pgfeed.assembler.model import StoredTransaction
from pgfeed.decoding.changes import TransactionDecoder
from pgfeed.decoding.model import Op
from pgfeed.decoding.relations import RelationCatalog
from pgfeed.decoding.runs import RowRun, change_total, loaded
from pgfeed.errors import PgfeedError, SchemaError
from pgfeed.pgoutput.encode import encode
from pgfeed.pgoutput.messages import (
    UNCHANGED_TOAST,
    DeleteMessage,
    InsertMessage,
    LogicalMessage,
    Message,
    RelationColumn,
    RelationMessage,
    TruncateMessage,
    TupleData,
    TypeMessage,
    UpdateMessage,
)

U = UNCHANGED_TOAST
ORDERS = 16384
ITEMS = 16390
K, O = ord("K"), ord("O")


def relation(relid: int = ORDERS, name: str = "orders",
             cols: tuple[tuple[str, int, bool], ...] = (("id", 23, True), ("status", 25, False),
                                                        ("body", 25, False)),
             identity: str = "d", namespace: str = "public") -> RelationMessage:
    return RelationMessage(None, relid, namespace, name, ord(identity),
                           tuple(RelationColumn(1 if key else 0, n, oid, -1) for n, oid, key in cols))


def full(relid: int = ORDERS) -> RelationMessage:
    """REPLICA IDENTITY FULL: pgoutput flags every column as part of the identity."""
    return relation(relid, cols=(("id", 23, True), ("status", 25, True), ("body", 25, True)),
                    identity="f")


def row(*values: object) -> TupleData:
    return TupleData(tuple(values))  # type: ignore[arg-type]


def ins(*values: object, relid: int = ORDERS) -> InsertMessage:
    return InsertMessage(None, relid, row(*values))


def upd(*new: object, old: tuple[object, ...] | None = None, kind: int = K,
        relid: int = ORDERS) -> UpdateMessage:
    if old is None:
        return UpdateMessage(None, relid, None, None, row(*new))
    return UpdateMessage(None, relid, kind, row(*old), row(*new))


def dele(*old: object, kind: int = K, relid: int = ORDERS) -> DeleteMessage:
    return DeleteMessage(None, relid, kind, row(*old))


def stored(*msgs: Message, commit_lsn: int = 0x2000, xid: int = 7) -> StoredTransaction:
    changes = sum(1 for m in msgs if not isinstance(m, (RelationMessage, TypeMessage)))
    schema = tuple(frame(commit_lsn - 0x100 + i, encode(m)) for i, m in enumerate(msgs)
                   if isinstance(m, (RelationMessage, TypeMessage)))
    payload = b"".join(frame(commit_lsn - 0x100 + i, encode(m)) for i, m in enumerate(msgs))
    return StoredTransaction(xid, commit_lsn, commit_lsn + 8, 1_000_000, None, changes, payload,
                             schema)


def catalog(*history: tuple[int, Message]) -> RelationCatalog:
    cat = RelationCatalog()
    for lsn, msg in history:
        cat.add(lsn, frame(lsn, encode(msg)))
    return cat


def decoder(*history: tuple[int, Message], **kw: object) -> TransactionDecoder:
    return TransactionDecoder(catalog(*history) if history else catalog((0x10, relation())), **kw)  # type: ignore[arg-type]


# -- inserts, updates, deletes by replica identity -------------------------------------------------

def test_insert_key_is_of_the_new_row() -> None:
    [c] = decoder().load(stored(ins("1", "new", None))).changes
    assert (c.op, c.schema, c.table, c.seq) == (Op.INSERT, "public", "orders", 0)
    assert c.key == {"id": 1} and c.before is None
    assert c.after == {"id": 1, "status": "new", "body": None} and c.unchanged_toast == []
    assert c.lsn == 0x2000 - 0x100


def test_update_without_old_part_takes_key_from_new_row() -> None:
    [c] = decoder().load(stored(upd("1", "paid", "b"))).changes
    assert c.key == {"id": 1} and c.before is None and c.after == {"id": 1, "status": "paid", "body": "b"}


def test_update_changing_the_key_names_the_old_key() -> None:
    [c] = decoder().load(stored(upd("2", "paid", "b", old=("1", None, None)))).changes
    assert c.key == {"id": 1} and c.before is None and c.after["id"] == 2


def test_delete_with_default_identity() -> None:
    [c] = decoder().load(stored(dele("1", None, None))).changes
    assert (c.op, c.key, c.before, c.after) == (Op.DELETE, {"id": 1}, None, None)


def test_replica_identity_full_gives_before_and_whole_row_key() -> None:
    dec = decoder((0x10, full()))
    upd_c, del_c = dec.load(stored(upd("1", "paid", "b", old=("1", "new", "b"), kind=O),
                                     dele("1", "paid", "b", kind=O))).changes
    assert upd_c.before == {"id": 1, "status": "new", "body": "b"} == upd_c.key
    assert upd_c.after == {"id": 1, "status": "paid", "body": "b"}
    assert del_c.before == {"id": 1, "status": "paid", "body": "b"} == del_c.key
    assert del_c.after is None


def test_replica_identity_nothing_has_no_key() -> None:
    nothing = relation(cols=(("id", 23, False), ("status", 25, False), ("body", 25, False)),
                       identity="n")
    a, b = decoder((0x10, nothing)).load(stored(ins("1", "x", None), upd("1", "y", None))).changes
    assert a.key is None and b.key is None and b.after == {"id": 1, "status": "y", "body": None}


def test_replica_identity_index_with_a_composite_key() -> None:
    rel = relation(cols=(("a", 23, True), ("b", 25, True), ("v", 1700, False)), identity="i")
    [c] = decoder((0x10, rel)).load(stored(upd("1", "x", "2.5", old=("1", "w", None)))).changes
    assert c.key == {"a": 1, "b": "w"} and c.after == {"a": 1, "b": "x", "v": Decimal("2.5")}


# -- unchanged TOAST ---------------------------------------------------------------------------------

def test_toast_omit_lists_and_omits() -> None:
    [c] = decoder().load(stored(upd("1", "paid", U))).changes
    assert c.unchanged_toast == ["body"] and c.after == {"id": 1, "status": "paid"}
    assert c.toast_filled is None


def test_toast_placeholder() -> None:
    dec = decoder(toast="placeholder", placeholder="<same>")
    [c] = dec.load(stored(upd("1", "paid", U))).changes
    assert c.unchanged_toast == ["body"] and c.after == {"id": 1, "status": "paid", "body": "<same>"}


def test_toast_default_placeholder() -> None:
    [c] = decoder(toast="placeholder").load(stored(upd("1", "paid", U))).changes
    assert c.after["body"] == "__pgfeed_unchanged_toast__"


def test_toast_reselect_takes_values_from_the_fill_index_by_position() -> None:
    fills = {(0x3000, 0): {"body": (25, "big body")}}
    dec = decoder(toast="reselect", fills=lambda c, s: fills.get((c, s), {}))
    [a, b] = dec.load(stored(upd("1", "paid", U), upd("2", "x", U), commit_lsn=0x3000)).changes
    assert a.after == {"id": 1, "status": "paid", "body": "big body"} and a.toast_filled == ["body"]
    assert b.after == {"id": 2, "status": "x"} and b.toast_filled == [] and b.unchanged_toast == ["body"]


def test_toast_reselect_is_the_same_whatever_was_decoded_before() -> None:
    """No state between calls: the answer at a position does not depend on earlier reads."""
    dec = decoder(toast="reselect", fills=lambda c, s: {})
    later = stored(upd("1", "paid", U), commit_lsn=0x3000)
    alone = dec.load(later).changes
    dec.load(stored(ins("1", "new", "body-1"), commit_lsn=0x2000))
    assert dec.load(later).changes == alone and alone[0].toast_filled == []


def test_toast_reselect_ignores_a_fill_of_another_type() -> None:
    dec = decoder(toast="reselect", fills=lambda c, s: {"body": (3802, "{}")})
    [c] = dec.load(stored(upd("1", "paid", U))).changes
    assert "body" not in c.after and c.toast_filled == []


def test_toast_reselect_loads_a_filled_value_with_the_column_type() -> None:
    rel = relation(cols=(("id", 23, True), ("doc", 3802, False), ("n", 1700, False)))
    dec = decoder((0x10, rel), toast="reselect",
                  fills=lambda c, s: {"doc": (3802, '{"a": [1, 2]}'), "n": (1700, "1.50")})
    [c] = dec.load(stored(upd("1", U, U))).changes
    assert c.after["doc"].text == '{"a": [1, 2]}' and c.after["n"] == Decimal("1.50")
    assert c.toast_filled == ["doc", "n"] == c.unchanged_toast


def test_unchanged_toast_in_a_typed_column() -> None:
    rel = relation(cols=(("id", 23, True), ("doc", 3802, False), ("blob", 17, False)))
    [c] = decoder((0x10, rel), toast="placeholder").load(stored(upd("1", U, U))).changes
    assert c.unchanged_toast == ["doc", "blob"]
    assert c.after == {"id": 1, "doc": "__pgfeed_unchanged_toast__", "blob": "__pgfeed_unchanged_toast__"}


def test_toast_mode_is_validated() -> None:
    with pytest.raises(ValueError):
        TransactionDecoder(RelationCatalog(), toast="fill")  # type: ignore[arg-type]


# -- truncate and messages -------------------------------------------------------------------------

def test_truncate_names_tables_and_options() -> None:
    dec = decoder((0x10, relation()), (0x10, relation(ITEMS, "items", namespace="")))
    [c] = dec.load(stored(TruncateMessage(None, 3, (ORDERS, ITEMS)))).changes
    assert c.op == Op.TRUNCATE and c.tables == ["public.orders", "pg_catalog.items"]
    assert c.options == {"cascade": True, "restart_identity": True}
    assert c.schema is None and c.key is None and c.after is None
    [c] = dec.load(stored(TruncateMessage(None, 0, (ORDERS,)))).changes
    assert c.options == {"cascade": False, "restart_identity": False}


def test_logical_message() -> None:
    msg = LogicalMessage(None, 1, 0x1F00, "app.audit", b"\x00hello")
    [c] = decoder().load(stored(msg)).changes
    assert (c.op, c.prefix, c.content, c.transactional) == (Op.MESSAGE, "app.audit", b"\x00hello", True)
    assert c.schema is None and c.table is None


# -- schema versions -----------------------------------------------------------------------------

def test_alter_table_mid_transaction_applies_to_later_changes() -> None:
    altered = relation(cols=(("id", 23, True), ("status", 25, False), ("body", 25, False),
                             ("total", 1700, False)))
    txn = stored(ins("1", "a", None), altered, ins("2", "b", None, "9.99"), commit_lsn=0x5000)
    cat = catalog((0x10, relation()))
    for lsn, f in [(txn.commit_lsn, f) for f in txn.schema_frames]:
        cat.add(lsn, f)
    first, second = TransactionDecoder(cat).load(txn).changes
    assert first.after == {"id": 1, "status": "a", "body": None}
    assert second.after == {"id": 2, "status": "b", "body": None, "total": Decimal("9.99")}
    assert [v.version for v in cat.versions(ORDERS)] == [1, 2]
    # a decoder whose catalog has not seen the transaction's schema frames decodes it the same
    first2, second2 = decoder().load(txn).changes
    assert (first2.after, second2.after) == (first.after, second.after)
    # a later transaction starts from the altered shape
    [c] = TransactionDecoder(cat).load(stored(ins("3", "c", None, "1"), commit_lsn=0x6000)).changes
    assert c.after["total"] == Decimal(1)


def test_schema_in_force_is_the_one_before_the_commit() -> None:
    v2 = relation(cols=(("id", 23, True), ("status", 1700, False), ("body", 25, False)))
    dec = decoder((0x10, relation()), (0x3000, v2))
    [old] = dec.load(stored(ins("1", "2.5", None), commit_lsn=0x2000)).changes
    [new] = dec.load(stored(ins("1", "2.5", None), commit_lsn=0x4000)).changes
    [same_lsn] = dec.load(stored(ins("1", "2.5", None), commit_lsn=0x3000)).changes
    assert old.after["status"] == "2.5" and new.after["status"] == Decimal("2.5")
    assert same_lsn.after["status"] == "2.5"  # T's own frames are in its payload, not before it


def test_type_messages_name_domains_and_enums() -> None:
    rel = relation(cols=(("id", 16500, True), ("mood", 16600, False), ("moods", 16601, False)))
    msgs = (TypeMessage(None, 16500, "", "int4"), TypeMessage(None, 16600, "public", "mood"),
            TypeMessage(None, 16601, "public", "_mood"), rel)
    [c] = decoder(*[(0x10, m) for m in msgs]).load(
        stored(ins("7", "happy", '{happy,"very sad",NULL}'))).changes
    assert c.after == {"id": 7, "mood": "happy", "moods": ["happy", "very sad", None]} and c.key == {"id": 7}
    # the same, with the Type and Relation messages only inside the transaction's own payload
    [c2] = decoder().load(stored(*msgs, ins("7", "happy", '{happy,"very sad",NULL}'))).changes
    assert c2.after == c.after


def test_unknown_relation_is_a_schema_error() -> None:
    with pytest.raises(SchemaError) as err:
        decoder().load(stored(ins("1", relid=999)))
    assert err.value.code == "schema_unknown" and isinstance(err.value, PgfeedError)
    assert "999" in str(err.value)
    with pytest.raises(SchemaError):
        decoder().load(stored(TruncateMessage(None, 0, (999,))))


def test_a_row_that_does_not_fit_its_relation_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="does not fit public.orders"):
        decoder().load(stored(ins("1", "two columns")))


# -- paging and filters --------------------------------------------------------------------------

def _many() -> StoredTransaction:
    items = relation(ITEMS, "items", cols=(("id", 23, True),))
    msgs: list[Message] = [items]
    for i in range(10):
        msgs.append(ins(str(i), "s", None) if i % 3 else ins(str(i), relid=ITEMS))
    msgs.append(LogicalMessage(None, 1, 0, "p", b"c"))
    msgs.append(dele("1", None, None))
    return stored(*msgs)


def test_paging_is_cursor_continuous() -> None:
    txn = _many()
    dec = decoder()
    whole = dec.load(txn)
    assert whole.change_count == 12 and len(whole.changes) == 12 and whole.last_seq == 11
    seen = []
    first = 0
    while first < txn.change_count:
        page = dec.load(txn, first_seq=first, max_changes=5)
        seen.extend(page.changes)
        assert page.last_seq == min(first + 4, 11)
        first = page.last_seq + 1  # type: ignore[operator]
    assert [c.seq for c in seen] == list(range(12))
    assert [c.after for c in seen] == [c.after for c in whole.changes]
    # fresh decoders (no resume point) give the same pages
    assert decoder().load(txn, first_seq=5, max_changes=5).changes[0].after == whole.changes[5].after


def test_filters_skip_but_consume_changes() -> None:
    txn = _many()
    page = decoder().load(txn, max_changes=6, tables={"public.orders"})
    assert [c.seq for c in page.changes] == [1, 2, 4, 5] and page.last_seq == 5
    page = decoder().load(txn, first_seq=6, tables={"public.items"})
    assert [c.seq for c in page.changes] == [6, 9] and page.last_seq == 11  # message skipped
    page = decoder().load(txn, ops={Op.DELETE, Op.MESSAGE})
    assert [(c.seq, c.op) for c in page.changes] == [(10, Op.MESSAGE), (11, Op.DELETE)]


def test_rows_come_as_runs_of_one_relation_version_that_the_filters_keep() -> None:
    """One lazy form (issue 29.2): consecutive row frames of one relation version are one run,
    which carries its version's plan and loads to what the reference decodes; a frame of another
    table, a message or a change the filters leave out ends a run; a page's bounds cut one."""
    txn = _many()  # seq 0-9: orders (1, 2, 4, 5, 7, 8) and items (0, 3, 6, 9); message; delete
    dec = decoder()
    read = dec.decode(txn)
    shape = [(c.plan.name, c.first_seq, c.count) if type(c) is RowRun else c.op
             for c in read.changes]
    assert shape == [("public.items", 0, 1), ("public.orders", 1, 2), ("public.items", 3, 1),
                     ("public.orders", 4, 2), ("public.items", 6, 1), ("public.orders", 7, 2),
                     ("public.items", 9, 1), Op.MESSAGE, ("public.orders", 11, 1)]
    assert change_total(read.changes) == 12 and read.last_seq == 11
    assert loaded(read).changes == dec.load(txn).changes
    runs = [c for c in read.changes if type(c) is RowRun]
    # items' version comes from the payload's own Relation frame (not numbered by the history)
    assert {r.plan.name: r.plan.schema.version for r in runs} == {"public.items": 0,
                                                                  "public.orders": 1}
    # filters end runs (and never merge across what they leave out), bounds cut them
    only = dec.decode(txn, tables={"public.orders"}, ops={Op.INSERT})
    assert [(c.first_seq, c.count) for c in only.changes if type(c) is RowRun] == [
        (1, 2), (4, 2), (7, 2)]
    page = decoder().decode(txn, first_seq=2, max_changes=4)
    assert [(c.first_seq, c.count) for c in page.changes if type(c) is RowRun] == [
        (2, 1), (3, 1), (4, 2)]
    # a run's frames load on demand, one at a time where an encoder stops
    first = runs[1]
    change, after = first.load_at(first.start, first.first_seq)
    assert change == dec.load(txn).changes[1] and after < first.end
    assert first.load_at(after, first.first_seq + 1)[0] == dec.load(txn).changes[2]


def test_page_past_the_end_and_empty_page() -> None:
    txn = _many()
    page = decoder().load(txn, first_seq=12)
    assert page.changes == [] and page.last_seq == 11
    page = decoder().load(txn, first_seq=3, max_changes=0)
    assert page.changes == [] and page.last_seq == 2


def test_transaction_metadata_is_carried() -> None:
    txn = stored(ins("1", "a", None), commit_lsn=0x16B374D848, xid=749)
    txn.origin = "node_b"
    out = decoder().load(txn)
    assert (out.xid, out.commit_lsn, out.end_lsn, out.commit_ts, out.origin) == (
        749, 0x16B374D848, 0x16B374D850, 1_000_000, "node_b")


# -- catalog -------------------------------------------------------------------------------------

def test_catalog_accepts_frames_messages_and_objects() -> None:
    cat = RelationCatalog()
    rel = relation()
    cat.add(0x10, frame(1, encode(rel)))
    cat.add(0x20, encode(rel))  # raw message bytes; same shape: not a new version
    cat.add(0x30, rel)
    assert len(cat.versions(ORDERS)) == 1 and cat.at(ORDERS, 0x11).version == 1
    assert cat.find(ORDERS, 0x10) is None
    with pytest.raises(SchemaError):
        cat.at(ORDERS, 0x10)
    with pytest.raises(SchemaError):
        cat.add(0x40, encode(ins("1", "a", None)))


def test_catalog_versions_and_tables_listing() -> None:
    cat = RelationCatalog()
    cat.add(0x10, TypeMessage(None, 16600, "public", "mood"))
    cat.add(0x10, relation(cols=(("id", 23, True), ("mood", 16600, False))))
    cat.add(0x30, relation(cols=(("id", 23, True), ("mood", 16600, False), ("n", 1700, False)),
                           identity="f"))
    cat.add(0x20, relation(cols=(("id", 20, True), ("mood", 16600, False))))  # arrives late
    assert [v.version for v in cat.versions(ORDERS)] == [1, 2, 3]
    assert cat.at(ORDERS, 0x21).columns[0].type_oid == 20
    [table] = cat.tables()
    assert (table["name"], table["schema"], table["table"], table["version"]) == (
        "public.orders", "public", "orders", 3)
    assert table["replica_identity"] == "full" and table["valid_from"] == "0/30"
    assert table["columns"] == [
        {"name": "id", "type_oid": 23, "type_name": "int4", "type": "integer", "typmod": -1,
         "key": True},
        {"name": "mood", "type_oid": 16600, "type_name": "public.mood", "type": "public.mood",
         "typmod": -1, "key": False},
        {"name": "n", "type_oid": 1700, "type_name": "numeric", "type": "numeric", "typmod": -1,
         "key": False},
    ]
    assert [v["version"] for v in table["versions"]] == [1, 2, 3]
    assert cat.type_name(16600) is not None and cat.type_name(16600).qualified == "public.mood"  # type: ignore[union-attr]


# -- the wire fast path agrees with the reference path (decode + row_loader) --------------------------

TYPED = relation(cols=(("id", 20, True), ("n", 1700, False), ("ts", 1184, False), ("f", 701, False),
                       ("doc", 3802, False), ("tags", 1009, False), ("t", 25, False)))
TYPED_ROWS = [
    ("1", "1.50", "2024-01-01 00:00:00+00", "-0", '{"a": [1]}', '{x,"y z",NULL}', "héllo"),
    ("2", "NaN", "infinity", "NaN", "null", "{}", ""),  # infinity: the fast path refuses the row
    ("3", None, None, None, None, None, None),
    ("4", "-Infinity", "0044-03-15 12:00:00+00 BC", "Infinity", "[]", "[0:0]={a}", "x"),
]


@pytest.mark.parametrize("values", TYPED_ROWS)
def test_fast_and_reference_paths_agree(values: tuple[str | None, ...]) -> None:
    from pgfeed.decoding.plan import RelationPlan
    from pgfeed.decoding.runs import _fast_rows, _slow_rows
    from pgfeed.pgoutput.decode import decode

    plan = RelationPlan.of(catalog((0x10, TYPED)).at(ORDERS, 0x11))
    for msg in (ins(*values), upd(*values, old=values, kind=O), dele(*values, kind=K)):
        buf = encode(msg)
        ref = _slow_rows(decode(buf), plan.load)  # type: ignore[arg-type]
        try:
            fast = _fast_rows(buf[0], buf, plan.wire_row)
        except Exception:
            continue
        assert repr(fast) == repr((ref[0], ref[1], ref[3]))  # repr: NaN != NaN


def test_rows_the_fast_path_refuses_decode_through_the_reference_path() -> None:
    dec = decoder((0x10, TYPED))
    a, b = dec.load(stored(ins(*TYPED_ROWS[1]), ins(*TYPED_ROWS[3]))).changes
    assert a.after["ts"] == "infinity" and b.after["ts"] == "0044-03-15 12:00:00+00 BC"
    assert str(a.after["n"]) == "NaN" and b.after["tags"] == ["a"]


def test_binary_values_are_kept_as_bytes() -> None:
    [c] = decoder().load(stored(ins(b"\x00\x00\x00\x01", "s", None))).changes
    assert c.after == {"id": b"\x00\x00\x00\x01", "status": "s", "body": None}


def test_malformed_row_bytes_raise_decode_error() -> None:
    from pgfeed.errors import DecodeError

    good = encode(ins("1", "a", None))
    bad = StoredTransaction(1, 0x2000, 0x2008, 0, None, 1, frame(0x1F00, good[:-1] + b"\xff\xfe"))
    with pytest.raises(DecodeError):
        decoder().load(bad)
