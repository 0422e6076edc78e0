"""Types of the compiled transcoder (_transcode.c); see transcode.py for what it computes."""

from collections.abc import Callable

KINDS: int
KIND_NAMES: tuple[str, ...]  # _kinds.h, generated from the type registry's FAST_KINDS

class Unsupported(ValueError): ...

class Encoder:
    def __init__(self, kinds: bytes, keys: tuple[int, ...], proto_names: tuple[bytes, ...],
                 json_names: tuple[bytes, ...], proto_ops: tuple[bytes, bytes, bytes],
                 json_ops: tuple[bytes, bytes, bytes], float_json: Callable[[bytes], bytes],
                 text_json: Callable[[bytes], bytes]) -> None: ...
    def proto(self, data: bytes, lsn: int, seq: int, middle: bytes = ..., tail: bytes = ...,
              /) -> bytes: ...
    def json(self, data: bytes, lsn: int, seq: int, middle: bytes, tail: bytes, /) -> bytes: ...
    def run(self, payload: bytes | bytearray, pos: int, count: int, seq: int, json: bool,
            middle: bytes, tail: bytes, /) -> tuple[list[bytes], int]: ...

ARROW_ABI: str  # arrow_abi.DIGEST of the interface it was built with (_arrow_abi.h)
PROTO_TAGS: str  # prototags.DIGEST of the protobuf tags it was built with (_proto_tags.h)

class Owned:
    """A buffer taken from ArrowRows (read-only, through the buffer protocol)."""

    def __buffer__(self, flags: int, /) -> memoryview: ...

Buffer = Owned | bytes
Buffers = tuple[Buffer | None, Buffer | None, Buffer | None, int]  # validity, values, data, nulls

class ArrowRows:
    """Typed Arrow buffers of one table's row changes (_transcode_arrow.c; see arrow_rows.py)."""

    rows: int
    def __init__(self, columns: tuple[tuple[int, int, int, int], ...], keys: tuple[int, ...],
                 names: tuple[bytes, ...]) -> None: ...
    def scan(self, payload: bytes | bytearray, pos: int, seq: int, stop: int, relation_id: int,
             kinds: bytes, commit_lsn: int, commit_ts: int, xid: int, flags: int, version: int,
             /) -> tuple[int, int, int]: ...
    def buffers(self) -> list[Buffers | Buffer]: ...
