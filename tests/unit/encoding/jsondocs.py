"""JSON documents as PostgreSQL prints them, for the exactness tests (issue 13, item 2).

``documents(n)`` writes json text the way a user may (numbers past 64 bits, long fractions,
exponents, ``-0.0``, unicode and control-character escapes, empty containers, whitespace, duplicate
keys, nesting past 500 levels): PostgreSQL's ``json`` prints such text exactly as it was given.
``jsonb_text`` is what ``jsonb`` prints for it (keys deduplicated, last wins, and sorted by length
then bytes; ``", "``/``": "`` spacing; numbers through ``numeric``; escapes decoded and written
again the ``escape_json`` way). ``tests/integration/test_json_exact.py`` holds ``jsonb_text`` to a
real PostgreSQL.
"""

from __future__ import annotations

import json
import random
import sys
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

__all__ = ["documents", "exact_tree", "jsonb_text", "random_document", "same_numbers"]

DEEP = (1, 2, 30, 499, 500, 501, 700, 1100)  # nesting wrapped around some documents

# Documents come from a seeded ``random.Random`` (hypothesis draws the seed): drawing every
# character through hypothesis cost ~7 ms a document, and the property runs over 10,000 a path.
_WS = ("", "", "", "", " ", "  ", "\n", "\t", "\r\n ")
_SPECIAL_NUMBERS = (
    "123456789012345678901234567890", "1e-7", "1E-7", "1E+300", "-0.0", "-0", "0", "0.0",
    "18446744073709551615", "18446744073709551616", "9223372036854775808",
    "-9223372036854775809", "0.10000000000000000001", "1e400", "-1e-400", "1.50", "1e007",
    "3.141592653589793238462643383279", "1.7976931348623157e308", "5e-324", "2.5E-0")
_ESCAPES = ('\\"', "\\\\", "\\/", "\\b", "\\f", "\\n", "\\r", "\\t",
            "\\u00e9", "\\u00E9", "\\ud83d\\ude00", "\\uD83D\\uDE00", "\\u2028",
            "\\u007f", "\\u0022", "\\u005c")
_RAW = "aZ09 ~'é€😀\u2028\x7f/<>&"  # raw characters a string may hold (no '"', no '\\')
_KEYS = ('"a"', '"b"', '"aa"', '"é"', '""', '"\\u0061"')


def _number(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return rng.choice(_SPECIAL_NUMBERS)
    text = rng.choice(("", "", "-")) + (
        "0" if rng.random() < 0.3 else str(rng.randint(1, 10 ** rng.randint(1, 40))))
    if rng.random() < 0.6:
        text += "." + "".join(rng.choices("0123456789", k=rng.randint(1, 40)))
    if rng.random() < 0.25:
        exp = rng.randint(0, 400)
        text += rng.choice("eE") + rng.choice(("", "+", "-")) + (
            f"{exp:03d}" if rng.random() < 0.5 else str(exp))
    return text


def _char(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.5:
        return rng.choice(_RAW)
    if r < 0.7:
        return rng.choice(_ESCAPES)
    if r < 0.8:
        return f"\\u{rng.randint(1, 0x1F):04x}"  # an escaped control character
    if r < 0.9:
        return f"\\u{rng.randint(0x20, 0xD7FF):04X}"
    return chr(rng.choice((rng.randint(0x20, 0x7E), rng.randint(0xA0, 0xD7FF),
                           rng.randint(0x10000, 0x10FFFF)))).replace('"', "'").replace("\\", "/")


def _random_string(rng: random.Random) -> str:
    return '"' + "".join(_char(rng) for _ in range(rng.randint(0, 10))) + '"'


def _value(rng: random.Random, leaves: list[int]) -> str:
    r = rng.random()
    if leaves[0] <= 0 or r < 0.55:
        leaves[0] -= 1
        r = rng.random()
        return (_number(rng) if r < 0.5 else _random_string(rng) if r < 0.8
                else rng.choice(("true", "false", "null")))
    ws = rng.choice
    if r < 0.78:
        items = [_value(rng, leaves) for _ in range(rng.randint(0, 4))]
        return "[" + ws(_WS) + ",".join(ws(_WS) + i + ws(_WS) for i in items) + "]"
    pairs = [(rng.choice(_KEYS) if rng.random() < 0.5 else _random_string(rng), _value(rng, leaves))
             for _ in range(rng.randint(0, 4))]
    return "{" + ws(_WS) + ",".join(f"{ws(_WS)}{k}{ws(_WS)}:{ws(_WS)}{v}{ws(_WS)}"
                                    for k, v in pairs) + "}"


def random_document(rng: random.Random, deep: bool = True) -> str:
    """One json text: a value, maybe wrapped in many levels of arrays and objects, maybe
    surrounded by whitespace."""
    doc = _value(rng, [rng.randint(1, 12)])
    if deep and rng.random() < 0.05:
        pattern = rng.randint(0, 255)
        for level in range(rng.choice(DEEP)):
            doc = f'{{"k": {doc}}}' if pattern >> (level % 8) & 1 else f"[{doc}]"
    return rng.choice(_WS) + doc + rng.choice(_WS)


def documents(n: int, deep: bool = True) -> st.SearchStrategy[list[str]]:
    """``n`` documents from a seed hypothesis draws."""
    return st.integers(0, 2**64).map(
        lambda seed: [random_document(random.Random(seed), deep) for _ in range(n)])


# -- what jsonb prints -----------------------------------------------------------------------------

class _Num(str):
    """A number's text, kept as written."""


def _parse(text: str) -> Any:
    """Numbers as ``_Num``, objects as lists of pairs (duplicates and order kept)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        return json.loads(text, parse_int=_Num, parse_float=_Num, parse_constant=_refuse,
                          object_pairs_hook=lambda pairs: ("object", pairs))
    finally:
        sys.setrecursionlimit(limit)


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _numeric(text: str) -> str:
    """numeric_out(numeric_in(text)): plain notation, the scale the input implies, no -0."""
    d = Decimal(text)
    out = format(d, "f")
    return out.lstrip("-") if d == 0 else out


_ESCAPED = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _string(s: str) -> str:
    """PostgreSQL's escape_json."""
    return '"' + "".join(_ESCAPED.get(c) or (f"\\u{ord(c):04x}" if c < " " else c) for c in s) + '"'


def _jsonb(v: Any, out: list[str]) -> None:
    if type(v) is _Num:
        out.append(_numeric(v))
    elif type(v) is str:
        out.append(_string(v))
    elif v is None:
        out.append("null")
    elif v is True or v is False:
        out.append("true" if v else "false")
    elif type(v) is tuple:
        unique = dict(v[1])  # the last value of a duplicated key wins
        keys = sorted(unique, key=lambda k: (len(k.encode()), k.encode()))
        out.append("{")
        for i, k in enumerate(keys):
            out.append(", " if i else "")
            out.append(_string(k) + ": ")
            _jsonb(unique[k], out)
        out.append("}")
    else:
        out.append("[")
        for i, item in enumerate(v):
            out.append(", " if i else "")
            _jsonb(item, out)
        out.append("]")


def jsonb_text(text: str) -> str:
    """What ``SELECT text::jsonb::text`` gives."""
    out: list[str] = []
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        _jsonb(_parse(text), out)
    finally:
        sys.setrecursionlimit(limit)
    return "".join(out)


# -- comparing parsed values ------------------------------------------------------------------------

def exact_tree(text: str) -> Any:
    """The document with every number a Decimal (duplicate keys: the last, as any dict)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 20_000))
    try:
        return json.loads(text, parse_int=Decimal, parse_float=Decimal)
    finally:
        sys.setrecursionlimit(limit)


def same_numbers(parsed: Any, exact: Any) -> bool:
    """``parsed`` (a client's value) holds exactly ``exact_tree``'s numbers: ints and Decimals
    equal, a float only where its shortest form is that number."""
    if isinstance(exact, Decimal):
        if type(parsed) is float:
            return Decimal(repr(parsed)) == exact and (parsed != 0 or str(exact)[0] != "-"
                                                       or repr(parsed)[0] == "-")
        return type(parsed) in (int, Decimal) and parsed == exact
    if type(exact) is dict:
        return type(parsed) is dict and list(parsed) == list(exact) and all(
            same_numbers(parsed[k], exact[k]) for k in exact)
    if type(exact) is list:
        return type(parsed) is list and len(parsed) == len(exact) and all(
            same_numbers(p, e) for p, e in zip(parsed, exact))
    return type(parsed) is type(exact) and parsed == exact
