"""Row changes straight from pgoutput bytes to JSON and protobuf bytes, with no Python values.

The read path's cost is per column: decoding a value into a Python object (psycopg's loaders)
only for an encoder to turn it back into text. For the common types the text PostgreSQL sent is
already, or nearly, what the contract wants — an int8 is a JSON number as it stands, a numeric the
string, a timestamptz needs a ``T`` and ``:00`` — so these encoders work on the text.

The replication session pins ``DateStyle=ISO``, ``TimeZone=UTC`` and ``extra_float_digits=3``
(``replication.session.SETTINGS``), which is what makes the text forms predictable.

Each relation version gets a generated function per format that walks TupleData (pgoutput's
``'n'``/``'t'`` columns) and converts every column inline. Anything outside the fast path raises:
a type without a fast kind in the type registry (``service/types``), a ``'u'`` (unchanged TOAST) or ``'b'`` (binary) column, a value
ISO 8601 cannot hold (``infinity``, BC, years past 9999), an odd layout. The caller then loads the
change the reference way (``RawChange.load``) and encodes that, so both paths give the same
events; ``tests/unit/encoding/test_transcode.py`` holds them to it.

The same rules are compiled in ``_transcode.c`` (built when a C compiler is there, ~10x faster a
change); this module's generated functions are the specification and the fallback. The
``PGFEED_IMPL`` environment variable picks one: ``c`` (fail without it), ``python``, or unset (C
when built).
"""

from __future__ import annotations

import binascii
import os
import re
import struct
from collections.abc import Callable
from datetime import date
from typing import Any

import orjson

from service.assembler.changes import RawChange, _Plan
from service.assembler.model import Op
from service.types.registry import FAST_KINDS, fast_kind
from service.encoding.protowire import SMALL as _SMALL
from service.encoding.protowire import VC as _VC
from service.encoding.protowire import V as _V
from service.encoding.protowire import map_column as _column
from service.encoding.protowire import varint

__all__ = ["IMPLEMENTATION", "json_event", "json_writers", "proto_change", "proto_writers",
           "transcoded"]


def _load_compiled() -> Any:
    wanted = os.environ.get("PGFEED_IMPL", "")
    if wanted not in ("", "c", "python"):
        raise ImportError(f"PGFEED_IMPL={wanted!r}: expected 'c' or 'python'")
    if wanted == "python":
        return None
    try:
        from service.encoding import _transcode
    except ImportError:
        if wanted == "c":
            raise
        return None
    return _transcode


_compiled = _load_compiled()
# which encoders json_writers/proto_writers build: "c" (service/encoding/_transcode.c) or "python"
IMPLEMENTATION = "c" if _compiled is not None else "python"

_u16_at = struct.Struct(">H").unpack_from
_u32_at = struct.Struct(">I").unpack_from


_INSERT, _UPDATE, _DELETE = ord("I"), ord("U"), ord("D")
_NEW, _KEY, _OLD = ord("N"), ord("K"), ord("O")


class _Unsupported(Exception):
    """A relation version with a column type the fast path does not know (cached per plan)."""


def _kinds(plan: _Plan) -> list[str]:
    kinds = []
    for col in plan.schema.columns:
        kind = fast_kind(col.value_oid)
        if kind is None:
            raise _Unsupported(col.name)
        kinds.append(kind)
    return kinds


# -- text forms (DateStyle ISO) ----------------------------------------------------------------------
# Python's isoformat (and orjson) write microseconds as six digits, or none when zero; PostgreSQL
# trims trailing zeros. Keyed by the text's length: the zeros to append (a missing key: not a shape
# the fast path knows).
_TSTZ_PAD = {22: b"", 24: b"00000", 25: b"0000", 26: b"000", 27: b"00", 28: b"0", 29: b""}
_TS_PAD = {19: b"", 21: b"00000", 22: b"0000", 23: b"000", 24: b"00", 25: b"0", 26: b""}
_TIME_PAD = {8: b"", 10: b"00000", 11: b"0000", 12: b"000", 13: b"00", 14: b"0", 15: b""}
_NANO_SCALE = (1, 100_000_000, 10_000_000, 1_000_000, 100_000, 10_000, 1000)
_UNIX_DAY0 = date(1970, 1, 1).toordinal()
_DAYS: dict[bytes, int] = {}
# PostgreSQL's ISO output, to the character: anything else (a damaged value) is the reference
# path's to judge. A fraction ending in '0' is not PostgreSQL's (it trims them) and would not match
# isoformat's; '24:00:00' is valid SQL that Python's time cannot hold; a year past 9999 or BC do
# not match.
_CLOCK = rb"(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{0,5}[1-9])?"
_DATE_SHAPE = re.compile(rb"\d{4}-\d\d-\d\d").fullmatch


def _day(t: bytes) -> int:
    """``YYYY-MM-DD`` -> days since 1970-01-01; ValueError unless a real date. Cached: the dates
    of a table cluster."""
    days = _DAYS.get(t)
    if days is None:
        if not _DATE_SHAPE(t):
            raise ValueError("not a date")
        days = date(int(t[:4]), int(t[5:7]), int(t[8:10])).toordinal() - _UNIX_DAY0
        if len(_DAYS) > 100_000:
            _DAYS.clear()
        _DAYS[t] = days
    return days


def _stamp(field: bytes, t: bytes) -> bytes:
    """``YYYY-MM-DD HH:MM:SS[.ffffff]`` (checked by the caller) -> a google.protobuf.Timestamp
    Value field, seconds since 1970 as Python's datetime arithmetic gives them."""
    seconds = (_day(t[:10]) * 86400 + int(t[11:13]) * 3600 + int(t[14:16]) * 60
               + int(t[17:19]))
    if (1 << 28) <= seconds < (1 << 35):  # 1978-07-04 .. 3058: five bytes
        body = b"\x08" + _VC[seconds & 0x3FFF] + _VC[seconds >> 14 & 0x3FFF] + _V[seconds >> 28]
    else:
        body = b"\x08" + varint(seconds) if seconds else b""
    if len(t) > 19:
        digits = t[20:]
        nanos = int(digits) * _NANO_SCALE[len(digits)]
        body += b"\x10" + varint(nanos)
    return field + _V[len(body)] + body


def _ld(field: bytes, payload: bytes) -> bytes:
    n = len(payload)
    return field + (_V[n] if n < _SMALL else varint(n)) + payload


# -- generated code ----------------------------------------------------------------------------------
# Per relation version, format and message (Insert, Update, Delete) one function walks the
# TupleData (pgoutput's ``'n'``/``'t'`` columns: kind byte, then for 't' a 4-byte length and the
# text) into locals and writes the whole change with one formatting operation. The statements
# below turn a column's text ``t`` into this format's bytes ``{v}``.
#
# Guards: a text of another shape raises (dates and times: DAY, TIME, TS, TSTZ above).
_JSON_CODE = {
    "int": ["{v} = t if t.isdigit() and t[0] != 48 else b'%d' % int(t)"],  # canonical, checked
    "float": ["{v} = dumps(float(t)) if t[-1] != 121 and t[-1] != 78 else b'\"' + t + b'\"'"],
    "numeric": ["if not NUMERIC_SHAPE(t): raise VE",
                "{v} = b'\"' + t + b'\"'"],
    "bool": ["{v} = TRUE if t == b't' else FALSE if t == b'f' else BAD()"],
    "text": ["{v} = b'\"' + t + b'\"' if t.isascii() and ESC(t) is None else dumps(t.decode())"],
    # PostgreSQL's json text, as is; a document that may nest deeper than a client's parser
    # takes (orjson: 1024 levels) is left to the reference path, which decides per value
    "json": ["if len(t) > 1000 and t.count(b'[') + t.count(b'{{') > 500: raise VE",
             "{v} = t"],
    "bytea": ["if t[:2] != b'\\\\x': raise VE",
              "{v} = b'\"' + B64(UNHEX(t[2:]), newline=False) + b'\"'"],
    "date": ["DAY(t)",
             "{v} = b'\"' + t + b'\"'"],
    "time": ["if not TIME(t): raise VE",
             "{v} = b'\"%s%s\"' % (t, TIME_PAD[len(t)])"],
    "timestamp": ["if not TS(t): raise VE",
                  "DAY(t[:10])",
                  "{v} = b'\"%sT%s%s\"' % (t[:10], t[11:], TS_PAD[len(t)])"],
    "timestamptz": ["if not TSTZ(t): raise VE",
                    "DAY(t[:10])",
                    "{v} = b'\"%sT%s%s+00:00\"' % (t[:10], t[11:-3], TSTZ_PAD[len(t)])"],
}
# Protobuf: ``{v}`` is the serialized Value. Strings of under 128 bytes take a precomputed head.
_PROTO_CODE = {
    "int": ["v = int(t)",
            ("{v} = (SI[v] if v < 16384 else INT + VC[v & 0x3FFF] + V[v >> 14]) "
             "if -1 < v < 268435456 else INT + VARINT(v)")],
    "float": ["{v} = DOUBLE(0x21, float(t))"],
    "numeric": ["if not NUMERIC_SHAPE(t): raise VE",
                "{v} = NUMERIC[len(t)] + t if len(t) < 128 else LD(b'\\x3a', t)"],
    "bool": ["{v} = PTRUE if t == b't' else PFALSE if t == b'f' else BAD()"],
    "text": ["if not t.isascii(): t.decode()",  # protobuf strings must be valid UTF-8
             "{v} = STRING[len(t)] + t if len(t) < 128 else LD(b'\\x2a', t)"],
    "json": [("{v} = NULL if t == b'null' else JSON[len(t)] + t if len(t) < 128 "
              "else LD(b'\\x4a', t)")],
    "bytea": ["if t[:2] != b'\\\\x': raise VE",
              "{v} = LD(b'\\x32', UNHEX(t[2:]))"],
    "date": ["DAY(t)",
             "{v} = DATE + t"],
    "time": ["if not TIME(t): raise VE",
             "{v} = LD(b'\\x6a', t + TIME_PAD[len(t)])"],
    "timestamp": ["if not TS(t): raise VE",
                  "{v} = STAMP(b'\\x5a', t)"],
    "timestamptz": ["if not TSTZ(t): raise VE",
                    "{v} = STAMP(b'\\x42', t[:-3])"],
}


def _heads(tag: int) -> list[bytes]:
    return [bytes((tag,)) + _V[n] for n in range(128)]


def _bad() -> bytes:
    raise ValueError("not the text form the fast path expects")


_ENV: dict[str, Any] = {
    "BAD": _bad, "u16": _u16_at, "u32": _u32_at, "VE": ValueError,
    "ESC": re.compile(rb'["\\\x00-\x1f]').search,
    "dumps": orjson.dumps, "TRUE": b"true", "FALSE": b"false", "B64": binascii.b2a_base64,
    "UNHEX": binascii.a2b_hex, "TIME_PAD": _TIME_PAD, "TS_PAD": _TS_PAD, "TSTZ_PAD": _TSTZ_PAD,
    "SI": [b"\x18" + _V[n] for n in range(_SMALL)], "INT": b"\x18", "VARINT": varint,
    "DOUBLE": struct.Struct("<Bd").pack, "LD": _ld, "NUMERIC": _heads(0x3a),
    "STRING": _heads(0x2a), "JSON": _heads(0x4a), "DATE": b"\x62\x0a", "NULL": b"\x08\x00",
    "PTRUE": b"\x10\x01", "PFALSE": b"\x10\x00", "STAMP": _stamp, "DAY": _day,
    "NUMERIC_SHAPE": re.compile(rb"-?\d+(?:\.\d+)?|NaN|-?Infinity").fullmatch,
    "TIME": re.compile(_CLOCK).fullmatch, "TS": re.compile(rb"\d{4}-\d\d-\d\d " + _CLOCK).fullmatch,
    "TSTZ": re.compile(rb"\d{4}-\d\d-\d\d " + _CLOCK + rb"\+00").fullmatch,
    "SEQ": [b""] + [b"\x10" + _V[n] for n in range(1, _SMALL)], "V": _V, "VC": _VC,
    "LSN": lambda lsn: b"\x08" + varint(lsn) if lsn else b"",
}


def _walk(kinds: list[str], code: dict[str, list[str]], null: str, prefix: str) -> list[str]:
    """Statements (at function level) that read the TupleData at ``pos`` into ``{prefix}{i}``."""
    lines = [f"    if u16(data, pos)[0] != {len(kinds)}: raise VE",
             "    pos += 2"]
    for i, kind in enumerate(kinds):
        var = f"{prefix}{i}"
        lines += ["    k = data[pos]",
                  "    if k == 116:",  # 't'
                  "        n = u32(data, pos + 1)[0]",
                  "        pos += 5",
                  "        t = data[pos:pos + n]",
                  "        pos += n"]
        lines += [f"        {stmt.format(v=var)}" for stmt in code[kind]]
        lines += ["    elif k == 110:",  # 'n'
                  f"        {var} = {null}",
                  "        pos += 1",
                  "    else:",  # 'u' (unchanged TOAST), 'b' (binary): the reference path
                  "        raise VE"]
    return lines


def _functions(kinds: list[str], code: dict[str, list[str]], null: str,
               result: Callable[[str, str, str], str], env: dict[str, Any]) -> dict[int, Any]:
    """``{tag: f(data, lsn, seq, middle, tail) -> bytes}`` for Insert, Update and Delete.

    ``result(op, key_from, old_kind)`` is the expression written for a change whose key comes
    from the ``n`` (new) or ``o`` (old) columns, with ``old_kind`` "K", "O" or "" (no old row).
    Layouts follow pgoutput's Insert ('N' tuple), Update (optional 'K'/'O' tuple, then 'N') and
    Delete ('K' or 'O' tuple) messages."""
    new, old = _walk(kinds, code, null, "n"), _walk(kinds, code, null, "o")
    end = ["    if pos != len(data): raise VE"]
    sig = "(data, lsn, seq, middle, tail):"
    lines = ["def insert" + sig,
             "    if data[5] != 78: raise VE",  # 'N'
             "    pos = 6", *new, *end,
             f"    return {result('insert', 'n', '')}",
             "def update" + sig,
             "    m = data[5]",
             "    pos = 6",
             "    if m == 78:", *("    " + x for x in (*new, *end)),
             f"        return {result('update', 'n', '')}",
             "    if m != 75 and m != 79: raise VE",  # 'K', 'O'
             *old,
             "    if data[pos] != 78: raise VE",
             "    pos += 1", *new, *end,
             "    if m == 75:",
             f"        return {result('update', 'o', 'K')}",
             f"    return {result('update', 'o', 'O')}",
             "def delete" + sig,
             "    m = data[5]",
             "    if m != 75 and m != 79: raise VE",
             "    pos = 6", *old, *end,
             "    if m == 75:",
             f"        return {result('delete', 'o', 'K')}",
             f"    return {result('delete', 'o', 'O')}"]
    scope = {**_ENV, **env}
    exec("\n".join(lines), scope)  # noqa: S102 - generated from the kind tables and positions only
    return {_INSERT: scope["insert"], _UPDATE: scope["update"], _DELETE: scope["delete"]}


def _cached(plan: _Plan, name: str, build: Callable[[_Plan], dict[int, Any]]) -> dict[int, Any]:
    key = f"{name}/{IMPLEMENTATION}"
    found = plan.cache.get(key)
    if found is None:
        try:
            found = _compiled_functions(plan, name) if IMPLEMENTATION == "c" else build(plan)
        except _Unsupported:
            found = {}
        plan.cache[key] = found
    return found


def transcoded(writers: dict[int, Any], change: RawChange, middle: bytes, tail: bytes) -> bytes | None:
    """``change`` written by ``writers`` (its relation version's ``json_writers`` or
    ``proto_writers``), or None when it needs the reference path (load, then encode)."""
    write = writers.get(change.tag)
    if write is None:
        return None
    try:  # try costs nothing until it raises; contextlib.suppress cost ~0.3 µs a change
        out: bytes = write(change.buf, change.lsn, change.seq, middle, tail)
    except Exception:  # noqa: BLE001 - any refusal: the reference path decides
        return None
    if change.op is _READ_OP:  # a backfill's Insert frame: the same event with op "read"
        return _as_read(out)
    return out


_READ_OP = Op.READ
_JSON_INSERT, _JSON_READ = b'"op":"insert"', b'"op":"read"'
_PROTO_INSERT, _PROTO_READ = b"\x18\x01", b"\x18\x06"


def _as_read(written: bytes) -> bytes | None:
    """An insert's event (JSON, or a protobuf Change, which writes its op field first) as the
    same row read by a backfill; None (reference path) for anything else."""
    if written[:2] == _PROTO_INSERT:
        return _PROTO_READ + written[2:]
    if _JSON_INSERT in written:
        return written.replace(_JSON_INSERT, _JSON_READ, 1)
    return None


# The C encoder takes the kinds as one byte each, in the registry's order (its _kinds.h).
_KIND_CODES = {kind: code for code, kind in enumerate(FAST_KINDS)}
if _compiled is not None and getattr(_compiled, "KIND_NAMES", None) != FAST_KINDS:  # a stale build
    raise ImportError("service/encoding/_transcode.c knows other kinds than the type registry: "
                      "rebuild it (pip install -e .)")


def _json_float(t: bytes) -> bytes:
    return orjson.dumps(float(t))


def _json_text(t: bytes) -> bytes:
    return orjson.dumps(t.decode())


def _compiled_functions(plan: _Plan, name: str) -> dict[int, Any]:
    """The ``{tag: write}`` of one format from the relation version's C encoder (both formats
    share one)."""
    encoder = plan.cache.get("encoder")
    if encoder is None:
        kinds = bytes(_KIND_CODES[k] for k in _kinds(plan))
        schema = plan.schema
        names = schema.column_names
        index = {n: i for i, n in enumerate(names)}
        where_json = b',"schema":%s,"table":%s,' % (orjson.dumps(schema.schema),
                                                   orjson.dumps(schema.table))
        where = _ld(b"\x22", schema.schema.encode()) + _ld(b"\x2a", schema.table.encode())
        encoder = plan.cache["encoder"] = _compiled.Encoder(
            kinds, tuple(index[k] for k in plan.key_names),
            tuple(b"\x0a" + varint(len(n.encode())) + n.encode() + b"\x12" for n in names),
            tuple(orjson.dumps(n) + b":" for n in names),
            (b"\x18\x01" + where, b"\x18\x02" + where, b"\x18\x03" + where),
            tuple(b'"op":"%s"%s' % (op, where_json) for op in (b"insert", b"update", b"delete")),
            _json_float, _json_text)
    write = encoder.json if name == "json" else encoder.proto
    return dict.fromkeys((_INSERT, _UPDATE, _DELETE), write)


# -- JSON ------------------------------------------------------------------------------------------

def _json_functions(plan: _Plan) -> dict[int, Any]:
    kinds = _kinds(plan)
    names = plan.schema.column_names
    index = {n: i for i, n in enumerate(names)}
    schema = plan.schema
    where = b',"schema":%s,"table":%s,' % (orjson.dumps(schema.schema), orjson.dumps(schema.table))
    templates: dict[str, bytes] = {}
    env: dict[str, Any] = {"T": templates}

    def obj(cols: tuple[str, ...]) -> bytes:
        return b"{" + b",".join(orjson.dumps(c).replace(b"%", b"%%") + b":%s"
                                for c in cols) + b"}"

    def result(op: str, key_from: str, old_kind: str) -> str:
        fmt = b'{"lsn":"%X/%X","seq":%d,%s"op":"' + op.encode() + b'"' + where.replace(b"%", b"%%")
        fmt += b'"key":' + (obj(plan.key_names) if plan.key_names else b"null") + b","
        args = [f"{key_from}{index[k]}" for k in plan.key_names]
        if old_kind == "O":
            fmt += b'"before":' + obj(names) + b","
            args += [f"o{i}" for i in range(len(names))]
        if op != "delete":
            fmt += b'"after":' + obj(names) + b","
            args += [f"n{i}" for i in range(len(names))]
        name = f"{op}{key_from}{old_kind}"
        templates[name] = fmt + b"%s"
        return (f"T[{name!r}] % (lsn >> 32, lsn & 0xFFFFFFFF, seq, middle, "
                f"{''.join(a + ', ' for a in args)}tail)")

    return _functions(kinds, _JSON_CODE, "b'null'", result, env)


def json_writers(plan: _Plan) -> dict[int, Any]:
    """``{message tag: write(data, lsn, seq, middle, tail) -> event bytes}`` for one relation
    version (empty when it has a column type outside the fast path); see ``json_event``."""
    return _cached(plan, "json", _json_functions)


def json_event(change: RawChange, middle: bytes, tail: bytes) -> bytes:
    """One change event as ``to_json.change_to_dict`` + ``dumps`` would write it (json values as
    PostgreSQL wrote them). ``middle`` is the transaction's ``"commit_lsn":…,"commit_ts":…,``
    part, ``tail`` its ``"unchanged_toast":[],"origin":…}``. Raises when the change needs the
    reference path."""
    return _or_raise(transcoded(json_writers(change.plan), change, middle, tail), change)


def _or_raise(written: bytes | None, change: RawChange) -> bytes:
    if written is None:
        raise ValueError(f"{change.plan.name}: change {change.seq} needs the reference path (a "
                         "type, value or layout outside the fast path)")
    return written


# -- protobuf --------------------------------------------------------------------------------------

def _proto_functions(plan: _Plan) -> dict[int, Any]:
    kinds = _kinds(plan)
    names = plan.schema.column_names
    index = {n: i for i, n in enumerate(names)}
    schema = plan.schema
    env: dict[str, Any] = {}
    for field, tag, cols in (("K", b"\x32", plan.key_names), ("B", b"\x3a", names),
                             ("A", b"\x42", names)):
        for i, col in enumerate(cols):
            env[f"{field}{i}"] = entry = _column(tag, col)
            env[f"{field}H{i}"] = entry.head
    where = _ld(b"\x22", schema.schema.encode()) + _ld(b"\x2a", schema.table.encode())
    env.update(INSERT=b"\x18\x01" + where, UPDATE=b"\x18\x02" + where, DELETE=b"\x18\x03" + where)

    def entries(field: str, variables: list[str]) -> list[str]:
        # a map entry: precomputed head for a Value of under 128 bytes
        return [f"({field}H{i}[ln] + {v} if (ln := len({v})) < 128 else {field}{i}.entry({v}))"
                for i, v in enumerate(variables)]

    def result(op: str, key_from: str, old_kind: str) -> str:
        parts = [op.upper(),
                 ("(b'\\x08' + VC[lsn & 0x3FFF] + VC[lsn >> 14 & 0x3FFF] + V[lsn >> 28] "
                  "if 268435456 <= lsn < 4398046511104 else LSN(lsn))"),
                 "(SEQ[seq] if seq < 16384 else b'\\x10' + VARINT(seq))"]
        parts += entries("K", [f"{key_from}{index[k]}" for k in plan.key_names])
        if old_kind == "O":
            parts += entries("B", [f"o{i}" for i in range(len(names))])
        if op != "delete":
            parts += entries("A", [f"n{i}" for i in range(len(names))])
        return "b''.join((" + ", ".join(parts) + ",))"

    return _functions(kinds, _PROTO_CODE, "NULL", result, env)


def proto_writers(plan: _Plan) -> dict[int, Any]:
    """``{message tag: write(data, lsn, seq, b"", b"") -> Change bytes}`` for one relation
    version (empty when it has a column type outside the fast path); see ``proto_change``."""
    return _cached(plan, "proto", _proto_functions)


def proto_change(change: RawChange) -> bytes:
    """The serialized ``pgfeed.v1.Change`` that ``to_proto.change_bytes`` gives for the loaded
    change (json values as PostgreSQL wrote them). Raises when it needs the reference path."""
    return _or_raise(transcoded(proto_writers(change.plan), change, b"", b""), change)
