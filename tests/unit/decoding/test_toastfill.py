"""The toast=reselect fill rule (``decoding.toastfill``): what an unchanged TOAST column of the
change at a position is, from the log before it alone."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pgfeed.decoding.relations import RelationCatalog, RelationSchema
from pgfeed.decoding.toastfill import (
    Held,
    MemoryImages,
    apply_relation,
    apply_row,
    apply_truncate,
)
from pgfeed.pgoutput.messages import DeleteMessage, InsertMessage, Message, UpdateMessage
from tests.unit.decoding.test_changes import ORDERS, K, U, dele, full, ins, relation, upd


def schema_of(msg: object = None) -> RelationSchema:
    return RelationCatalog().build(msg or relation(), 0x10)  # type: ignore[arg-type]


ORD = schema_of()


def run(*changes: Message, schema: RelationSchema = ORD,
        images: MemoryImages | None = None) -> list[dict[str, Held]]:
    """Each change applied at position (0x1000 * (i + 1), 0); the fills of each."""
    images = images if images is not None else MemoryImages()
    out = []
    for i, msg in enumerate(changes):
        assert isinstance(msg, (InsertMessage, UpdateMessage, DeleteMessage))
        out.append(apply_row(images, (0x1000 * (i + 1), 0), msg, schema))
    return out


def test_fills_from_the_newest_earlier_image_and_names_its_source() -> None:
    fills = run(ins("1", "new", "v1"), upd("1", "a", U), upd("1", "b", "v2"), upd("1", "c", U),
                upd("1", "d", U))
    assert fills[1] == {"body": (25, "v1", 0x1000, 0)}
    assert fills[3] == {"body": (25, "v2", 0x3000, 0)}
    assert fills[4] == {"body": (25, "v2", 0x3000, 0)}  # a filled image passes the value on
    assert fills[0] == fills[2] == {}


def test_a_row_never_seen_is_not_filled() -> None:
    assert run(ins("2", "x", "other"), upd("1", "a", U)) == [{}, {}]


def test_a_key_change_moves_the_image() -> None:
    fills = run(ins("1", "new", "v1"), upd("5", "moved", U, old=("1", None, None), kind=K),
                upd("5", "again", U), upd("1", "stale", U))
    assert fills[1]["body"][1] == "v1" and fills[2]["body"][1] == "v1"
    assert fills[3] == {}  # key 1 names no row any more


def test_a_delete_ends_the_image_and_a_reinsert_starts_a_new_one() -> None:
    fills = run(ins("1", "new", "v1"), dele("1", None, None), upd("1", "a", U),
                ins("1", "again", "w"), upd("1", "b", U))
    assert fills[2] == {} and fills[4] == {"body": (25, "w", 0x4000, 0)}


def test_a_truncate_ends_every_image_of_the_table() -> None:
    images = MemoryImages()
    run(ins("1", "new", "v1"), images=images)
    other = schema_of(relation(relid=ORDERS + 1, name="items"))
    run(ins("1", "x", "kept"), schema=other, images=images)
    apply_truncate(images, [ORDERS])
    assert run(upd("1", "a", U), images=images) == [{}]
    assert run(upd("1", "a", U), schema=other, images=images)[0]["body"][1] == "kept"


def test_a_full_old_image_fills_from_the_change_itself() -> None:
    fills = run(upd("1", "paid", U, old=("1", "new", "big"), kind=ord("O")), schema=schema_of(full()))
    assert fills == [{"body": (25, "big", 0x1000, 0)}]


def test_a_key_that_cannot_be_read_trusts_no_image_of_its_table() -> None:
    """DEFAULT identity, no old part, the key column itself unchanged TOAST: which row changed is
    unknown, so no image of the table may fill anything later (it could be that row's)."""
    text_key = schema_of(relation(cols=(("id", 25, True), ("status", 25, False), ("body", 25, False))))
    fills = run(ins("k1", "new", "v1"), ins("k2", "new", "v2"), upd(U, "x", "changed"),
                upd("k1", "a", U), schema=text_key)
    assert fills[3] == {}


def test_a_null_or_a_value_of_another_type_is_not_a_fill() -> None:
    images = MemoryImages()
    run(ins("1", "new", None), ins("2", "new", "{}"), images=images)
    assert run(upd("1", "a", U), images=images) == [{}]
    jsonb = schema_of(relation(cols=(("id", 23, True), ("status", 25, False), ("body", 3802, False))))
    assert run(upd("2", "a", U), schema=jsonb, images=images) == [{}]


def test_a_new_replica_identity_ends_the_images() -> None:
    images = MemoryImages()
    run(ins("1", "new", "v1"), images=images)
    apply_relation(images, ORD, ORD)  # the same identity: nothing ends
    assert run(upd("1", "a", U), images=images)[0]["body"][1] == "v1"
    apply_relation(images, ORD, schema_of(full()))
    assert run(upd("1", "b", U), images=images) == [{}]


_op = st.tuples(st.sampled_from(["insert", "set_body", "touch", "rekey", "delete", "truncate"]),
                st.integers(0, 3), st.integers(0, 3), st.integers(0, 99))


@settings(max_examples=300, deadline=None)
@given(st.lists(_op, max_size=40))
def test_every_fill_is_the_rows_value_at_that_position(ops: list[tuple[str, int, int, int]]) -> None:
    """A table simulated from empty, its changes as pgoutput sends them (an update that leaves
    body alone sends it as unchanged TOAST): every fill is the value the row held then, and a row
    the log has shown is always filled."""
    table: dict[int, str] = {}
    images = MemoryImages()
    for n, (op, key, other, value) in enumerate(ops):
        pos = (n + 1, 0)
        body = f"body-{value}"
        if op == "truncate":
            apply_truncate(images, [ORDERS])
            table.clear()
            continue
        if op == "insert" and key not in table:
            table[key] = body
            assert apply_row(images, pos, ins(str(key), "s", body), ORD) == {}
        elif op == "set_body" and key in table:
            table[key] = body
            assert apply_row(images, pos, upd(str(key), "s", body), ORD) == {}
        elif op == "touch" and key in table:
            fills = apply_row(images, pos, upd(str(key), f"s{value}", U), ORD)
            assert fills["body"][1] == table[key]
        elif op == "rekey" and key in table and other not in table:
            table[other] = table.pop(key)
            fills = apply_row(images, pos, upd(str(other), "s", U, old=(str(key), None, None)), ORD)
            assert fills["body"][1] == table[other]
        elif op == "delete" and key in table:
            del table[key]
            assert apply_row(images, pos, dele(str(key), None, None), ORD) == {}
