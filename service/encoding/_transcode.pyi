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
