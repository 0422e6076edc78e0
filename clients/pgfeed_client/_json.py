"""JSON parsing that keeps every number exact: pages, and json/jsonb documents.

A json/jsonb document holds numbers no float can (``123456789012345678901234567890``,
``0.10000000000000000001``, ``1e400``). orjson turns integers past 64 bits into floats, and
any parser rounds a long fraction. Here an integer is an ``int`` (any size), any other number a
``float`` when the float says exactly that number (its shortest form has the same decimal value,
as every float8 column pgfeed writes does), else a ``Decimal`` with every digit.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any, Self

import orjson

__all__ = ["JSON_NULL", "MAX_EMBEDDED_DEPTH", "JsonNull", "dumps_exact", "embeddable", "json_depth", "loads_exact",
           "loads_page", "number"]

# A json/jsonb document is embedded in an HTTP event as PostgreSQL printed it unless it nests
# deeper than this: then the event holds it as a JSON string of that text, so a page stays
# parseable (orjson stops at 1024 levels, Python's json near its recursion limit of 1000; an event
# adds 5). The gRPC client applies the same rule to ``json_value``, so both clients give the same
# value. The server's fast paths decline any document that might be that deep (over 1000 bytes
# holding over 500 brackets); ``pgfeed.encoding.to_json`` applies the rule.
MAX_EMBEDDED_DEPTH = 500

_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def json_depth(text: str) -> int:
    """How deep a JSON document nests (``1`` -> 0, ``[[]]`` -> 2); brackets in strings do not
    count."""
    depth = deepest = 0
    for m in _JSON_TOKEN.finditer(text):
        c = m.group()
        if c == "[" or c == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif c == "]" or c == "}":
            depth -= 1
    return deepest


def embeddable(text: str) -> bool:
    """Whether a document nests at most ``MAX_EMBEDDED_DEPTH`` levels (cheap for short ones)."""
    return (len(text) <= 2 * MAX_EMBEDDED_DEPTH
            or text.count("[") + text.count("{") <= MAX_EMBEDDED_DEPTH
            or json_depth(text) <= MAX_EMBEDDED_DEPTH)


def number(text: str) -> float | Decimal:
    """A JSON number with a fraction or exponent: a float if it holds it exactly, else Decimal."""
    value = float(text)
    shortest = repr(value)
    if shortest == text or (value - value == 0 and Decimal(shortest) == Decimal(text)):
        return value
    return Decimal(text)


_DECODER = json.JSONDecoder(parse_float=number)


def loads_exact(text: str | bytes) -> Any:
    """``json.loads`` with exact numbers (see the module docstring)."""
    return _DECODER.decode(text if isinstance(text, str) else text.decode())


# Where orjson may not keep a number exactly: an integer of 19+ digits (past int64/uint64), a
# fraction of 16+ digits, an exponent of three digits. Digits inside strings also count (a
# numeric's text, say): that only costs the slower exact parse. Found by mapping bytes to classes
# (digit or '.', 'e'/'E', sign, other) and searching the result: a regular expression took as
# long as orjson's whole parse.
_CLASSES = bytes(
    ord("d") if chr(b) in "0123456789." else ord("e") if chr(b) in "eE"
    else ord("s") if chr(b) in "+-" else ord("x") for b in range(256))
_LONG = b"d" * 16


def _risky(content: bytes) -> bool:
    classes = content.translate(_CLASSES)
    return _LONG in classes or b"eddd" in classes or b"esddd" in classes


def loads_page(content: bytes) -> Any:
    """A response body: orjson (fast) when no number in it could lose a digit there, else
    ``loads_exact``."""
    if not _risky(content):
        return orjson.loads(content)
    return loads_exact(content)


class JsonNull:
    """The JSON document ``null`` held by a json/jsonb column, as the client library gives it
    (``JSON_NULL``, the one instance), where ``None`` is SQL NULL. Falsy, and written back as
    ``null`` by ``dumps_exact``. A ``null`` *inside* a document (``{"a": null}``) stays None."""

    __slots__ = ()
    _instance: JsonNull | None = None

    def __new__(cls) -> Self:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance  # type: ignore[return-value]

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "JSON_NULL"

    def __reduce__(self) -> str:  # pickled (Spark) as the module's one instance
        return "JSON_NULL"


JSON_NULL = JsonNull()


def mark_json_null(row: dict[str, Any] | None, names: Any) -> None:
    """Put ``JSON_NULL`` in ``row`` for the ``names`` an event's ``json_null`` lists for it."""
    if row is not None and names:
        for name in names:
            if name in row and row[name] is None:
                row[name] = JSON_NULL


def json_nulls(images: dict[str, dict[str, Any] | None]) -> dict[str, list[str]] | None:
    """``{image: sorted columns holding JSON_NULL}`` for the non-empty ones, None when none: the
    server's ``json_null``, rebuilt from values (the gRPC client)."""
    found = {image: sorted(k for k, v in row.items() if v is JSON_NULL)
             for image, row in images.items() if row}
    found = {image: names for image, names in found.items() if names}
    return found or None


def dumps_exact(value: Any) -> str:
    """Compact JSON text of a parsed value, numbers as ``loads_exact`` gave them (a Decimal with
    all its digits, an int of any size), non-ASCII characters as they are."""
    t = type(value)
    if t is dict:
        return "{" + ",".join(_string(k) + ":" + dumps_exact(v) for k, v in value.items()) + "}"
    if t is list:
        return "[" + ",".join(dumps_exact(v) for v in value) + "]"
    if t is Decimal:
        return str(value)
    if t is JsonNull:
        return "null"
    return _string(value)


def _string(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
