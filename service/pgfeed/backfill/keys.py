"""Keys in pgoutput tuples and 32-bit xid order: the pure helpers of the chunk window."""

from __future__ import annotations

from collections.abc import Sequence

from pgfeed.netorder import U16, U32
from pgfeed.pgoutput.decode import decode
from pgfeed.pgoutput.messages import RelationMessage

Key = tuple[bytes, ...]

_u32 = U32.unpack_from
_u16 = U16.unpack_from


def precedes(a: int, b: int) -> bool:
    """32-bit xid ``a`` is older than ``b`` (PostgreSQL's modulo-2^32 comparison)."""
    return a != b and ((a - b) & 0xFFFFFFFF) >= 0x80000000


def key_positions(relation: RelationMessage, key_names: Sequence[str]) -> tuple[int, ...] | None:
    """Where the key columns sit in the relation's TupleData (None when one is missing)."""
    names = [c.name for c in relation.columns]
    try:
        return tuple(names.index(k) for k in key_names)
    except ValueError:
        return None


def tuple_key(buf: bytes | memoryview, pos: int, positions: tuple[int, ...]) -> tuple[Key | None, int]:
    """The key values of the TupleData at ``pos`` (None when a key column is not sent whole) and
    the position after the tuple."""
    count = _u16(buf, pos)[0]
    pos += 2
    values: list[bytes | None] = [None] * count
    for i in range(count):
        kind = buf[pos]
        pos += 1
        if kind in (116, 98):  # 't', 'b'
            n = _u32(buf, pos)[0]
            values[i] = bytes(buf[pos + 4:pos + 4 + n])
            pos += 4 + n
    key = []
    for p in positions:
        v = values[p] if p < count else None
        if v is None:
            return None, pos
        key.append(v)
    return tuple(key), pos


def add_key(keys: set[Key], key: Key | None) -> bool:
    if key is None:
        return False
    keys.add(key)
    return True


def same_relation(schema: tuple[bytes, ...], rel: RelationMessage) -> bool:
    for message in schema:
        if message[:1] == b"R":
            ours = decode(message)
            assert isinstance(ours, RelationMessage)
            if ours.relation_id == rel.relation_id:
                return (ours.columns == rel.columns and ours.replica_identity == rel.replica_identity
                        and (ours.namespace, ours.relation_name) == (rel.namespace, rel.relation_name))
    return False
