"""The tables C and Python share come from one definition each (issue 29.4): the committed
generated files are what ``python -m pgfeed.encoding.tables`` writes, the compiled module was built
from them, and the protobuf tags are the ones the protobuf runtime itself writes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import message_factory

from pgfeed import prototags
from pgfeed.encoding import _transcode, arrow_abi, tables
from pgfeed.encoding.arrow_abi import META_COLUMNS, META_KINDS, ArrowKind, Meta, Slot
from pgfeed_client.pgtypes import METADATA_COLUMN_TYPES

ROOT = Path(__file__).resolve().parents[3]
_GENERATED = tables.generated()


@pytest.mark.parametrize("path", list(_GENERATED), ids=lambda p: Path(p).name)
def test_generated_file_is_fresh(path: Path) -> None:
    assert path.read_text() == _GENERATED[path](), \
        "stale: run python -m pgfeed.encoding.tables, then rebuild (setup.py build_ext --inplace)"


def test_compiled_module_was_built_from_these_tables() -> None:
    assert _transcode.PROTO_TAGS == prototags.DIGEST
    assert _transcode.ARROW_ABI == arrow_abi.DIGEST


def _sample(field: Any) -> Any:
    """A value the protobuf runtime writes (not a default, which it leaves out)."""
    if field.message_type is not None:
        if field.message_type.GetOptions().map_entry:
            value = field.message_type.fields_by_name["value"]
            return {"k": _sample(value)}
        cls = message_factory.GetMessageClass(field.message_type)
        inner = next(f for f in field.message_type.fields if f.type != f.TYPE_ENUM or
                     len(f.enum_type.values) > 1)
        sample = cls(**{inner.name: _sample(inner)})
        return [sample] if field.is_repeated else sample
    if field.type in (field.TYPE_STRING,):
        value: Any = "x"
    elif field.type == field.TYPE_BYTES:
        value = b"x"
    elif field.type == field.TYPE_BOOL:
        value = True
    elif field.type in (field.TYPE_DOUBLE, field.TYPE_FLOAT):
        value = 1.5
    elif field.type == field.TYPE_ENUM:
        value = field.enum_type.values[-1].number
    else:
        value = 7
    return [value] if field.is_repeated else value


def _written_tags() -> list[tuple[str, bytes, bytes]]:
    """(name, generated tag, what the runtime writes for a message holding only that field)."""
    from pgfeed_proto.v1 import feed_pb2

    out = []
    pool = feed_pb2.DESCRIPTOR.pool
    tags, _enums = tables.proto_tables()
    for tag in tags:
        message = pool.FindMessageTypeByName(tag.message)
        if message.GetOptions().map_entry:
            continue  # written through their map field, below
        field = next(f for f in message.fields if f.number == tag.number)
        cls = message_factory.GetMessageClass(message)
        out.append((tag.name, getattr(prototags, tag.name),
                    cls(**{field.name: _sample(field)}).SerializeToString()))
    return out


def test_every_tag_is_what_the_protobuf_runtime_writes() -> None:
    written = _written_tags()
    assert len(written) > 60  # Transaction, Change, Value, Ddl, DdlColumn, Timestamp, ValueList
    for name, tag, data in written:
        assert data.startswith(tag), (name, tag, data[:4])


def test_map_entries_and_enums_match_the_runtime() -> None:
    from pgfeed_proto.v1 import feed_pb2

    change = feed_pb2.Change(key={"id": feed_pb2.Value(int_value=1)}, options={"cascade": True})
    data = change.SerializeToString()
    key = prototags.CHANGE_KEY_ENTRY_KEY + b"\x02id"
    value = prototags.CHANGE_KEY_ENTRY_VALUE + b"\x02" + prototags.VALUE_INT_VALUE + b"\x01"
    assert prototags.CHANGE_KEY + bytes((len(key + value),)) + key + value in data
    option = prototags.CHANGE_OPTIONS_ENTRY_KEY + b"\x07cascade" \
        + prototags.CHANGE_OPTIONS_ENTRY_VALUE + b"\x01"
    assert prototags.CHANGE_OPTIONS + bytes((len(option),)) + option in data
    assert {v.name: v.number for v in feed_pb2.Op.DESCRIPTOR.values} == {
        name: getattr(prototags, name) for name in dir(prototags) if name.startswith("OP_")}
    assert prototags.VALUE == {f.name: getattr(prototags, f"VALUE_{f.name.upper()}")
                               for f in feed_pb2.Value.DESCRIPTOR.fields}


def test_header_names_a_two_byte_tag_apart() -> None:
    header = tables.render_proto_header()
    assert '#define PB_CHANGE_TABLE_VERSION_BYTES "\\x80\\x01"' in header
    assert "#define PB_CHANGE_LSN 0x08 " in header and "#define PB_OP_READ 6" in header


def test_arrow_metadata_is_the_typed_schemas() -> None:
    """META_COLUMNS names the typed schema's metadata columns in their order, and each is
    written as the Arrow kind its column type holds (a timestamp's microseconds as int64)."""
    assert list(META_COLUMNS) == [name for name, _t in METADATA_COLUMN_TYPES]
    as_kind = {"string": ArrowKind.STRING, "int64": ArrowKind.INT64, "int32": ArrowKind.INT32,
               "timestamptz": ArrowKind.INT64}
    for name, t in METADATA_COLUMN_TYPES:
        slot = META_COLUMNS[name]
        meta = Meta[slot.name]
        kind = t.element.kind if t.kind == "list" and t.element is not None else t.kind
        assert META_KINDS[meta] == as_kind[kind], name
    assert META_KINDS[Meta.KEY_VALID] == ArrowKind.BOOL
    assert [s for s in Slot if s.name not in Meta.__members__] == [Slot.TOAST_OFFSETS]


def test_arrow_header_refuses_a_definition_out_of_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_abi, "META_KINDS",
                        {m: k for m, k in META_KINDS.items() if m is not Meta.TABLE_VERSION})
    with pytest.raises(ValueError, match="META_KINDS"):
        tables.render_arrow_header()
    monkeypatch.setattr(arrow_abi, "META_KINDS", META_KINDS)
    monkeypatch.setattr(arrow_abi, "ROW_OPS", ("insert", "delete"))
    with pytest.raises(ValueError, match="WANT_DELETE"):
        tables.render_arrow_header()


# A tag spelled by hand: a hex byte where C writes a field's key, a bytes literal handed to a
# field writer or followed by a varint in Python.
_C_HAND_TAG = re.compile(r"\b(?:put_ld|put_stamp|proto_entry|PUT1|put1)\([^;]*?\b0x[0-9a-fA-F]{2}\b")
_PY_HAND_TAG = re.compile(r"""(?:text_field|ld_field|_strings|_timestamp|timestamp_field)\(b["']"""
                          r"""|b["'](?:\\x[0-9a-f]{2})+["']\s*\+\s*\(?(?:varint|_?V\[|_?VC\[)""")
_ENCODERS = ("service/pgfeed/encoding/to_proto.py", "service/pgfeed/encoding/transcode.py",
             "service/pgfeed/protowire.py", *(f"service/pgfeed/types/{p.name}" for p in sorted(
                 (ROOT / "service/pgfeed/types").glob("*.py"))))


def _hand_tags(root: Path) -> list[str]:
    c = root / "service/pgfeed/encoding/_transcode.c"
    found = [f"_transcode.c:{n}" for n, line in enumerate(c.read_text().splitlines(), 1)
             if _C_HAND_TAG.search(line)]
    return found + [f"{name}:{n}" for name in _ENCODERS
                    for n, line in enumerate((root / name).read_text().splitlines(), 1)
                    if _PY_HAND_TAG.search(line)]


def test_no_encoder_spells_a_tag_by_hand() -> None:
    assert _hand_tags(ROOT) == [], "use pgfeed.prototags (Python) or PB_* (_proto_tags.h)"
    assert _C_HAND_TAG.search("        return put_ld(b, 0x2a, t, n);")
    assert _C_HAND_TAG.search("    if (c->lsn && (put1(b, 0x08) < 0 || put_varint(b, c->lsn) < 0))")
    assert _PY_HAND_TAG.search('    out += text_field(b"\\x2a", txn.origin)')
    assert _PY_HAND_TAG.search('        out.append(b"\\x10" + (_V[seq] if seq < _SMALL else 0))')
    assert not _PY_HAND_TAG.search('_TRUE, _FALSE = VALUE["bool_value"] + b"\\x01"')
