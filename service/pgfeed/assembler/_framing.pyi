"""Types of the compiled frame-walk step (_framing.c); see framing.py's ``extent``."""

def extent(payload: bytes | bytearray | memoryview, pos: int, end: int, relation_id: int,
           limit: int, tags: bytes, /) -> tuple[int, int]: ...
