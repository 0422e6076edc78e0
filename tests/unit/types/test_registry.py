"""The type registry (``service/pgfeed/types``) is the one table of type rules: its generated C header
is fresh, the compiled encoder was built from it, every family's declaration names real types,
Value fields and column kinds, and the tables derived from it are what the encoders use."""

from __future__ import annotations

import re

import pytest

from pgfeed.encoding import _transcode, transcode
from pgfeed.protowire import VALUE
from pgfeed.types import kinds_header
from pgfeed.types.registry import FAMILIES, FAST_KINDS, family_of, fast_kind, loader_oid, type_of
from pgfeed_client.pgtypes import BUILTIN_TYPES, COLUMN_KINDS, TEXT_ARRAY_OID, TEXT_OID
from pgfeed_proto.v1 import feed_pb2


def test_generated_kind_header_is_fresh() -> None:
    """``_kinds.h`` is what ``python -m pgfeed.types.kinds_header`` writes from the registry."""
    assert kinds_header.HEADER.read_text() == kinds_header.render(), \
        "stale: run python -m pgfeed.types.kinds_header, then rebuild (setup.py build_ext)"


def test_compiled_encoder_knows_the_registry_kinds_in_order() -> None:
    assert _transcode.KIND_NAMES == FAST_KINDS
    assert transcode._KIND_CODES == {kind: i for i, kind in enumerate(FAST_KINDS)}


def test_every_family_declares_real_types_fields_and_columns() -> None:
    value_fields = {f.name: (f.number << 3 | (1 if f.type == f.TYPE_DOUBLE else 0 if f.type in (
        f.TYPE_BOOL, f.TYPE_INT64, f.TYPE_ENUM) else 2)) for f in feed_pb2.Value.DESCRIPTOR.fields}
    assert {name: tag[0] for name, tag in VALUE.items()} == value_fields
    seen: set[int] = set()
    for family in FAMILIES:
        assert family.types and family.json, family.name
        for t in family.types:
            assert t.oid in BUILTIN_TYPES and t.oid not in seen, (family.name, t.oid)
            seen.add(t.oid)
            assert t.proto in VALUE, (family.name, t.proto)
            assert t.column.kind in COLUMN_KINDS
            assert t.fast is None or t.fast in FAST_KINDS
            if t.shape is not None:
                re.compile(t.shape)
        assert set(family.loaders) <= set(family.oids), family.name


@pytest.mark.parametrize(("oid", "family", "loads_as", "kind", "proto"), [
    (23, "integer", 23, "int", "int_value"),
    (701, "floating", 701, "float", "double_value"),
    (1700, "numeric", 1700, "numeric", "numeric_value"),
    (16, "boolean", 16, "bool", "bool_value"),
    (25, "text", TEXT_OID, "text", "string_value"),
    (1043, "text", TEXT_OID, "text", "string_value"),  # varchar: no family of its own
    (869, "text", TEXT_OID, "text", "string_value"),  # inet
    (3802, "json", 3802, "json", "json_value"),
    (17, "bytea", 17, "bytea", "bytes_value"),
    (1184, "datetime", 1184, "timestamptz", "timestamp_value"),
    (1266, "datetime", 1266, None, "time_value"),
    (1186, "interval", 1186, None, "interval_value"),
    (2950, "uuid", TEXT_OID, "text", "string_value"),
    (790, "money", 790, "money", "numeric_value"),
    (1007, "array", 1007, None, "list_value"),  # int4[]: element by element
    (1041, "array", TEXT_ARRAY_OID, None, "list_value"),  # inet[]: text elements
    (1020, "text", TEXT_OID, "text", "string_value"),  # box[]: ";"-delimited, stays text
])
def test_lookups_by_oid(oid: int, family: str, loads_as: int, kind: str | None, proto: str) -> None:
    assert family_of(oid).name == family
    assert loader_oid(oid) == loads_as
    assert fast_kind(oid) == kind
    assert type_of(oid).proto == proto


# texts PostgreSQL prints that a kind's shape matches, and texts it must hand to the reference path
SHAPES: dict[int, tuple[list[str], list[str]]] = {
    790: (["$0.00", "-$1,234.56", "$999.99", "-$92,233,720,368,547,758.08"],
          ["1.000,00 €", "$1000.00", "$1,00.00", "$1.5", "USD 1.00", "$,100.00", "-$"]),
    1700: (["1.5", "-0", "NaN", "-Infinity", "12345678901234567890.000001"], ["1e5", "1.", ".5", "+1"]),
    16: (["t", "f"], ["true", "x", ""]),
    20: (["0", "-9223372036854775808"], ["1.0", "x"]),
    1082: (["2026-01-02", "0001-01-01"], ["infinity", "0044-03-15 BC", "10000-01-01"]),
    1184: (["2026-01-02 03:04:05.5+00"], ["2026-01-02 03:04:05.50+00", "infinity", "2026-01-02 24:00:00+00"]),
}


@pytest.mark.parametrize("oid", sorted(SHAPES))
def test_a_compiled_kind_writes_exactly_the_texts_its_shape_matches(oid: int) -> None:
    """The registry's text shape is the compiled kind's contract: what it matches the C encoder
    writes, what it does not is handed to the reference path (which keeps it exact)."""
    from tests.unit.encoding.test_transcode import RELID, decoder, stored, tuple_data

    shape = re.compile(type_of(oid).shape or b".*")
    dec = decoder([("id", 23, True), ("v", oid, False)])
    header = b"I" + RELID.to_bytes(4, "big") + b"N"
    good, bad = SHAPES[oid]
    for text, written in [(t, True) for t in good] + [(t, False) for t in bad]:
        assert bool(shape.fullmatch(text.encode())) is written, text
        (run,) = dec.decode(stored([header + tuple_data(["1", text])])).changes
        fast, _ = transcode.encoder(run.plan).run(run.payload, run.start, 1, 0, True, b"", b"}")
        assert bool(fast) is written, text
