"""Protobuf wire primitives shared by the type registry's writers (``service/pgfeed/types``) and the
encoders (``encoding/to_proto``, ``encoding/transcode``): varints,
google.protobuf.Timestamp fields and precomputed ``map<string, Value>`` entry heads. Field tags come
from ``pgfeed.prototags``, generated from feed.proto."""

from __future__ import annotations

from pgfeed import prototags as _tags
from pgfeed.prototags import VALUE

__all__ = ["HEADS", "SMALL", "VALUE", "VC", "MapColumn", "V", "ld_field", "map_column",
           "table_version_field", "text_field", "timestamp_field", "varint"]

# VALUE: pgfeed.v1.Value's field tags by field name (field number << 3 | wire type), which the
# type registry's families name
_STRING = _tags.VALUE_STRING_VALUE
_SECONDS, _NANOS = _tags.TIMESTAMP_SECONDS, _tags.TIMESTAMP_NANOS

SMALL = 1 << 14
# V[n]: varint of n < 2**14; VC[n]: the two-byte group form of n < 2**14 with the continuation
# bit on both bytes, to prefix the higher groups of a larger number.
V = [bytes((n,)) if n < 128 else bytes((n & 0x7F | 0x80, n >> 7)) for n in range(SMALL)]
VC = [bytes((n & 0x7F | 0x80, n >> 7 | 0x80)) for n in range(SMALL)]


def varint(n: int) -> bytes:
    """Protobuf base-128 varint; negative numbers as 64-bit two's complement (int64)."""
    if n < 0:
        n += 1 << 64
    if n < SMALL:
        return V[n]
    if n < 1 << 28:
        return VC[n & 0x3FFF] + V[n >> 14]
    if n < 1 << 42:
        return VC[n & 0x3FFF] + VC[n >> 14 & 0x3FFF] + V[n >> 28]
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def ld_field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    n = len(payload)
    return tag + (V[n] if n < SMALL else varint(n)) + payload


def text_field(tag: bytes, text: str) -> bytes:
    """A string field (UTF-8)."""
    return ld_field(tag, text.encode())


TABLE_VERSION_TAG = _tags.CHANGE_TABLE_VERSION  # field 16: two tag bytes


def table_version_field(version: int | None) -> bytes:
    """Change.table_version (the relation version a row change was decoded with); 0 or None
    (an unnumbered version) is left out, as protobuf leaves out zeros."""
    return TABLE_VERSION_TAG + varint(version) if version else b""


def timestamp_field(field: bytes, seconds: int, micros: int) -> bytes:
    """A google.protobuf.Timestamp field: seconds (int64), nanos (int32); zeros are left out."""
    if (1 << 28) <= seconds < (1 << 35):  # 1978-07-04 .. 3058: five bytes
        body = _SECONDS + VC[seconds & 0x3FFF] + VC[seconds >> 14 & 0x3FFF] + V[seconds >> 28]
    else:
        body = _SECONDS + varint(seconds) if seconds else b""
    if micros:
        nanos = micros * 1000
        body += _NANOS + (VC[nanos & 0x3FFF] + VC[nanos >> 14 & 0x3FFF] + V[nanos >> 28]
                           if nanos >= 1 << 28 else varint(nanos))
    return field + V[len(body)] + body


HEADS = 128  # precomputed entry heads for Value payloads shorter than this
# a map<string, Value> entry's key and value fields (key, before and after entries are alike)
_ENTRY_KEY, _ENTRY_VALUE = _tags.CHANGE_KEY_ENTRY_KEY, _tags.CHANGE_KEY_ENTRY_VALUE


class MapColumn:
    """Precomputed bytes of one column's map entries in one map field.

    ``head[m]`` is everything before a Value of ``m`` bytes: field tag, entry length, the key,
    the value tag and length. ``text_head[n]`` also covers the string_value tag and length of an
    ``n``-byte string, so a short text value costs one lookup."""

    __slots__ = ("head", "prefix", "tag", "text_head")

    def __init__(self, tag: bytes, name: str) -> None:
        key = name.encode()
        self.tag = tag
        self.prefix = _ENTRY_KEY + varint(len(key)) + key + _ENTRY_VALUE
        self.head = [self._head(m) for m in range(HEADS)]
        self.text_head = [self.head[n + 2] + _STRING + V[n] for n in range(HEADS - 2)]

    def _head(self, m: int) -> bytes:
        entry = len(self.prefix) + len(varint(m)) + m
        return self.tag + varint(entry) + self.prefix + varint(m)

    def entry(self, value: bytes) -> bytes:
        m = len(value)
        return (self.head[m] if m < HEADS else self._head(m)) + value


_MAP_COLUMNS: dict[tuple[bytes, str], MapColumn] = {}


def map_column(tag: bytes, name: str) -> MapColumn:
    col = _MAP_COLUMNS.get((tag, name))
    if col is None:
        if len(_MAP_COLUMNS) > 20_000:
            _MAP_COLUMNS.clear()
        col = _MAP_COLUMNS[(tag, name)] = MapColumn(tag, name)
    return col
