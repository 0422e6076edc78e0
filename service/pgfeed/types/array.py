"""Arrays (``_int4``, ``text[]``, ...): JSON arrays, protobuf list_value, Arrow/Spark lists of
the element's type. Arrays of a loaded family load element by element (psycopg's array loaders);
arrays of anything else are lists of the elements' text (``text[]``). An array whose load fails
loads element by element, each element that fails keeping its text. No fast kind: a relation
with an array column is written by the reference path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pgfeed.types.family import PgType, TypeFamily
from pgfeed_client.pgtypes import BUILTIN_TYPES, TEXT_OID, builtin_oid

__all__ = ["ELEMENT_OID", "FAMILY", "NO_SPLIT", "load_leniently", "parse_array"]

# array OID -> element OID (text for an element that is no built-in type)
ELEMENT_OID: dict[int, int] = {
    oid: builtin_oid(name[1:]) or TEXT_OID for oid, name in BUILTIN_TYPES.items() if name.startswith("_")}
NO_SPLIT = frozenset({1020})  # box[]: ';'-delimited and its elements hold commas: stays text


def parse_array(text: str, delimiter: str = ",") -> list[Any]:
    """PostgreSQL array text -> nested lists of ``str | None`` (quotes, backslashes, NULL,
    nesting and a ``[lo:hi]=`` dimension prefix handled). Raises ValueError if malformed."""
    pos = 0
    if text.startswith("["):
        pos = text.index("=") + 1
    try:
        value, pos = _parse_list(text, pos, delimiter)
    except IndexError:
        raise ValueError(f"unterminated array literal {text!r}") from None
    if text[pos:].strip():
        raise ValueError(f"trailing characters after array literal {text!r}")
    return value


def _parse_list(text: str, pos: int, delim: str) -> tuple[list[Any], int]:
    if text[pos] != "{":
        raise ValueError(f"expected '{{' at {pos} in {text!r}")
    pos += 1
    out: list[Any] = []
    if text[pos] == "}":
        return out, pos + 1
    while True:
        c = text[pos]
        item: Any
        if c == "{":
            item, pos = _parse_list(text, pos, delim)
        elif c == '"':
            pos += 1
            chars = []
            while text[pos] != '"':
                if text[pos] == "\\":
                    pos += 1
                chars.append(text[pos])
                pos += 1
            pos += 1
            item = "".join(chars)
        else:
            start = pos
            while text[pos] != delim and text[pos] != "}":
                pos += 1
            token = text[start:pos].strip()
            item = None if token.upper() == "NULL" else token.replace("\\", "")
        out.append(item)
        c = text[pos]
        if c == delim:
            pos += 1
        elif c == "}":
            return out, pos + 1
        else:
            raise ValueError(f"unexpected {c!r} at {pos} in {text!r}")


def load_leniently(text: str, load: Callable[[bytes], Any]) -> Any:
    """An array whose whole load failed: each element through ``load`` (its element type's
    loader), an element it refuses keeping its text; the text itself if it is no array."""
    try:
        tree = parse_array(text)
    except ValueError:
        return text

    def walk(node: list[Any]) -> list[Any]:
        out: list[Any] = []
        for item in node:
            if item is None:
                out.append(None)
            elif isinstance(item, list):
                out.append(walk(item))
            else:
                try:
                    out.append(load(item.encode()))
                except Exception:  # noqa: BLE001 - a refused element keeps its text
                    out.append(item)
        return out

    return walk(tree)


FAMILY = TypeFamily(
    name="array",
    types=tuple(PgType(oid, "list_value") for oid in sorted(ELEMENT_OID) if oid not in NO_SPLIT),
    json="an array of the elements' JSON values (nested for more dimensions)",
)
