"""Generates the tables C and Python share, each from its one definition:

- ``pgfeed/prototags.py`` and ``encoding/_proto_tags.h``: every protobuf field tag and enum value
  of the messages the encoders write by hand (``pgfeed.v1.Transaction`` and all it holds), read
  from the descriptor of ``protos/pgfeed/v1/feed.proto`` (``pgfeed_proto.v1.feed_pb2``, itself
  checked against the .proto by ``tests/unit/grpc_api/test_proto_fresh.py``);
- ``encoding/_arrow_abi.h``: the interface of the compiled typed-Arrow rows, from
  ``encoding/arrow_abi.py``;
- ``encoding/_kinds.h``: the column kinds, from the type registry (``types/kinds_header.py``).

Run after changing any of them: ``python -m pgfeed.encoding.tables``, then rebuild the extension
(``cd service && python setup.py build_ext --inplace``). ``tests/unit/encoding/test_tables.py``
fails when a committed file is stale.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pgfeed.encoding import arrow_abi
from pgfeed.types import kinds_header

__all__ = ["ARROW_HEADER", "PROTO_HEADER", "PROTO_MODULE", "ProtoTag", "generated",
           "proto_tables", "render_arrow_header", "render_proto_header", "render_proto_module"]

_HERE = Path(__file__).resolve().parent
PROTO_MODULE = _HERE.parent / "prototags.py"
PROTO_HEADER = _HERE / "_proto_tags.h"
ARROW_HEADER = _HERE / "_arrow_abi.h"
_PACKAGE = "pgfeed.v1"
_ROOT_MESSAGE = "Transaction"  # the encoders write it and everything it holds


# -- protobuf tags -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ProtoTag:
    """One field: ``name`` is ``<MESSAGE>_<FIELD>`` (``CHANGE_LSN``), ``tag`` its encoded key."""

    message: str  # the message's full name
    name: str
    number: int
    wire_type: int
    type_name: str
    tag: bytes


_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _wire_type(field: Any) -> int:
    packed = field.is_packed if hasattr(field, "is_packed") else False
    if packed:
        return _LEN
    t = field.type
    if t in (field.TYPE_DOUBLE, field.TYPE_FIXED64, field.TYPE_SFIXED64):
        return _I64
    if t in (field.TYPE_FLOAT, field.TYPE_FIXED32, field.TYPE_SFIXED32):
        return _I32
    if t in (field.TYPE_STRING, field.TYPE_BYTES, field.TYPE_MESSAGE):
        return _LEN
    if t == field.TYPE_GROUP:
        raise ValueError(f"{field.full_name}: groups are not written")
    return _VARINT


def _varint(n: int) -> bytes:
    """protowire.varint's loop: the generator imports nothing that imports what it generates
    (protowire imports prototags), so it runs when prototags.py is missing."""
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _upper(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", camel).upper()


def _message_name(full_name: str) -> str:
    """``pgfeed.v1.Change.KeyEntry`` -> ``CHANGE_KEY_ENTRY``; ``google.protobuf.Timestamp`` ->
    ``TIMESTAMP``."""
    parts = full_name.removeprefix(_PACKAGE + ".").split(".")
    if full_name.startswith("google.protobuf."):
        parts = parts[2:]
    return "_".join(_upper(p) for p in parts)


_TYPE_NAMES = {"TYPE_" + n.upper(): n for n in (
    "double", "float", "int64", "uint64", "int32", "fixed64", "fixed32", "bool", "string",
    "bytes", "uint32", "sfixed32", "sfixed64", "sint32", "sint64")}


def _type_name(field: Any) -> str:
    if field.message_type is not None:
        entry = field.message_type.GetOptions().map_entry
        return "map" if entry else str(field.message_type.name)
    if field.enum_type is not None:
        return str(field.enum_type.name)
    for attr, name in _TYPE_NAMES.items():
        if field.type == getattr(field, attr):
            return name
    raise ValueError(f"{field.full_name}: unknown type {field.type}")


def proto_tables(root: Any | None = None) -> tuple[list[ProtoTag], list[tuple[str, int]]]:
    """The tags of ``root`` (default ``pgfeed.v1.Transaction``) and of every message it holds,
    breadth first in field order, and the values of the pgfeed.v1 enums among their fields."""
    if root is None:
        from pgfeed_proto.v1 import feed_pb2

        root = feed_pb2.DESCRIPTOR.message_types_by_name[_ROOT_MESSAGE]
    tags: list[ProtoTag] = []
    enums: list[tuple[str, int]] = []
    seen_messages, seen_enums, todo = {root.full_name}, set(), [root]
    while todo:
        message = todo.pop(0)
        prefix = _message_name(message.full_name)
        for field in message.fields:
            wire = _wire_type(field)
            tags.append(ProtoTag(message.full_name, f"{prefix}_{_upper(field.name)}", field.number,
                                 wire, _type_name(field), _varint(field.number << 3 | wire)))
            if field.message_type is not None and field.message_type.full_name not in seen_messages:
                seen_messages.add(field.message_type.full_name)
                todo.append(field.message_type)
            enum = field.enum_type
            if (enum is not None and enum.full_name not in seen_enums
                    and enum.full_name.startswith(_PACKAGE + ".")):
                seen_enums.add(enum.full_name)
                enums.extend((v.name, v.number) for v in enum.values)
    names = [t.name for t in tags] + [n for n, _ in enums]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ValueError(f"generated names clash: {', '.join(clash)}")
    return tags, enums


def _digest(tags: list[ProtoTag], enums: list[tuple[str, int]]) -> str:
    table = [(t.name, t.tag.hex()) for t in tags] + [(n, str(v)) for n, v in enums]
    return hashlib.sha1(repr(table).encode()).hexdigest()[:16]


def _py_bytes(b: bytes) -> str:
    return 'b"' + "".join(f"\\x{x:02x}" for x in b) + '"'


def _by_message(tags: list[ProtoTag], heading: str, line: Callable[[ProtoTag], str]) -> list[str]:
    """One line a tag, each message's under a heading naming it."""
    out: list[str] = []
    message = None
    for t in tags:
        if t.message != message:
            message = t.message
            out += ["", heading.format(message)]
        out.append(line(t))
    return out


def _c_define(t: ProtoTag) -> str:
    if len(t.tag) == 1:
        return f"#define PB_{t.name} 0x{t.tag[0]:02x} /* {t.number}: {t.type_name} */"
    literal = "".join(f"\\x{x:02x}" for x in t.tag)
    return f'#define PB_{t.name}_BYTES "{literal}" /* {t.number}: {t.type_name} */'


def render_proto_module(tables: tuple[list[ProtoTag], list[tuple[str, int]]] | None = None) -> str:
    """``pgfeed/prototags.py``: each tag as bytes (``CHANGE_LSN = b"\\x08"``), the Op values,
    ``VALUE`` (Value's tags by field name, as the type registry's families name them) and
    ``DIGEST`` (which the compiled module carries too)."""
    tags, enums = tables if tables is not None else proto_tables()
    lines = [
        '"""GENERATED by ``python -m pgfeed.encoding.tables`` from protos/pgfeed/v1/feed.proto (its',
        "descriptor): do not edit. The protobuf field tags (field number << 3 | wire type, as",
        "varint bytes) of every message the encoders write by hand, named ``<MESSAGE>_<FIELD>``,",
        "and the values of its enums. ``encoding/_proto_tags.h`` is the same table for C.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Final",
        "",
        f'DIGEST: Final = "{_digest(tags, enums)}"',
    ]
    lines += _by_message(tags, "# {}", lambda t: (
        f"{t.name}: Final = {_py_bytes(t.tag)}  # {t.number}: {t.type_name}"))
    lines += ["", f"# {_PACKAGE} enums"]
    lines += [f"{name}: Final = {value}" for name, value in enums]
    value_tags = [t for t in tags if t.message == f"{_PACKAGE}.Value"]
    lines += ["", "# pgfeed.v1.Value's tags by field name (the type families' ``proto``)",
              "VALUE: Final[dict[str, bytes]] = {"]
    lines += [f'    "{t.name.removeprefix("VALUE_").lower()}": {t.name},' for t in value_tags]
    lines += ["}", ""]
    return "\n".join(lines)


def render_proto_header(tables: tuple[list[ProtoTag], list[tuple[str, int]]] | None = None) -> str:
    """``encoding/_proto_tags.h``: ``PB_<MESSAGE>_<FIELD>``, the one-byte tag; a tag of more
    bytes (field 16 on) is ``PB_<MESSAGE>_<FIELD>_BYTES``, a string literal."""
    tags, enums = tables if tables is not None else proto_tables()
    lines = [
        "/* GENERATED by python -m pgfeed.encoding.tables from protos/pgfeed/v1/feed.proto (its",
        " * descriptor): do not edit. PB_<MESSAGE>_<FIELD> is a field's tag byte (field number << 3",
        " * | wire type); a tag of two bytes (fields from 16 on) is PB_<MESSAGE>_<FIELD>_BYTES, a",
        " * string literal. pgfeed/prototags.py is the same table for Python. */",
        "#ifndef PGFEED_PROTO_TAGS_H",
        "#define PGFEED_PROTO_TAGS_H",
        f'#define PROTO_TAGS_DIGEST "{_digest(tags, enums)}"',
    ]
    lines += _by_message(tags, "/* {} */", _c_define)
    lines += ["", f"/* {_PACKAGE} enums */"]
    lines += [f"#define PB_{name} {value}" for name, value in enums]
    lines += ["", "#endif", ""]
    return "\n".join(lines)


# -- the typed Arrow rows' interface ------------------------------------------------------------

def _check_arrow() -> None:
    """The relations arrow_abi states in prose, which the C code relies on."""
    A, M, S, F = arrow_abi.ArrowKind, arrow_abi.Meta, arrow_abi.Slot, arrow_abi.ScanFlag
    B = arrow_abi.ColumnBuffer
    if set(arrow_abi.META_KINDS) != set(M):
        raise ValueError("META_KINDS must give every metadata column its kind")
    expected = [m.name for m in M]
    expected.insert(expected.index("TOAST_NAME"), "TOAST_OFFSETS")
    if [s.name for s in S] != expected or [s.value for s in S] != list(range(len(S))):
        raise ValueError("Slot must be Meta with TOAST_OFFSETS just before TOAST_NAME")
    for enum in (A, M, B):
        if [e.value for e in enum] != list(range(len(enum))):
            raise ValueError(f"{enum.__name__} must count from 0")
    for i, op in enumerate(arrow_abi.ROW_OPS):
        if F[f"WANT_{op.upper()}"] != F.WANT_INSERT << i:
            raise ValueError(f"ScanFlag.WANT_{op.upper()} must be WANT_INSERT << {i}")


def render_arrow_header() -> str:
    """``encoding/_arrow_abi.h``: the enums A_, SPEC_, B_, M_, S_ and ROW_, META_KINDS, OP_NAMES
    and the F_ flags."""
    _check_arrow()

    def enum(prefix: str, members: list[str]) -> list[str]:
        body = ", ".join(f"{prefix}_{m}" for m in members) + f", {prefix}_COUNT"
        return [f"enum {{ {body} }};"]

    A, M, S = arrow_abi.ArrowKind, arrow_abi.Meta, arrow_abi.Slot
    lines = [
        "/* GENERATED by python -m pgfeed.encoding.tables from service/pgfeed/encoding/arrow_abi.py:",
        " * do not edit. The interface between arrow_rows.py and ArrowRows (_transcode_arrow.c). */",
        "#ifndef PGFEED_ARROW_ABI_H",
        "#define PGFEED_ARROW_ABI_H",
        f'#define ARROW_ABI_DIGEST "{arrow_abi.DIGEST}"',
        "/* Arrow column kinds (ArrowKind) */",
        *enum("A", [a.name for a in A]),
        "/* a column spec's items, in the order ArrowRows() parses them (ColumnSpec) */",
        *enum("SPEC", [name.upper() for name in arrow_abi.ColumnSpec._fields]),
        "/* the items of a column's entry in buffers() (ColumnBuffer) */",
        *enum("B", [b.name for b in arrow_abi.ColumnBuffer]),
        "/* metadata columns after the table's columns and key fields (Meta) */",
        *enum("M", [m.name for m in M]),
        "static const int META_KINDS[M_COUNT] = {"
        + ", ".join(f"A_{arrow_abi.META_KINDS[m].name}" for m in M) + "};",
        "/* buffers()'s entries after the table columns and key fields (Slot) */",
        *enum("S", [s.name for s in S]),
        "/* the _op of a row, by scan()'s op index (ROW_OPS) */",
        *enum("ROW", [op.upper() for op in arrow_abi.ROW_OPS]),
        "static const char *const OP_NAMES[ROW_COUNT] = {"
        + ", ".join(f'"{op}"' for op in arrow_abi.ROW_OPS) + "};",
        "/* scan()'s flags (ScanFlag); F_WANT(op): the flag of op index op */",
        *(f"#define F_{f.name} {f.value}" for f in arrow_abi.ScanFlag),
        "#define F_WANT(op) (F_WANT_INSERT << (op))",
        "#endif",
        "",
    ]
    return "\n".join(lines)


def generated() -> dict[Path, Callable[[], str]]:
    """Every generated file and what renders it."""
    tables = proto_tables()
    return {
        PROTO_MODULE: lambda: render_proto_module(tables),
        PROTO_HEADER: lambda: render_proto_header(tables),
        ARROW_HEADER: render_arrow_header,
        kinds_header.HEADER: kinds_header.render,
    }


if __name__ == "__main__":
    for path, render in generated().items():
        text = render()
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path}")
        else:
            print(f"fresh {path}")
