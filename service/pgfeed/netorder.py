"""Precompiled big-endian (network byte order) ``struct`` scalars, defined once for everything that
reads or writes PostgreSQL's wire (pgoutput, the replication protocol, backfill rows and their
schema notes) and the change log's payloads. Pure: no I/O, and it imports nothing of pgfeed.

Hot loops bind the method they call once (``_u32_at = U32.unpack_from``): a module attribute
lookup a call would cost more than the unpack.
"""

from __future__ import annotations

from struct import Struct

__all__ = ["I16", "I32", "I64", "U8", "U16", "U32", "U64"]

U8 = Struct(">B")
I16 = Struct(">h")
U16 = Struct(">H")
I32 = Struct(">i")
U32 = Struct(">I")  # relation ids, xids, lengths
I64 = Struct(">q")
U64 = Struct(">Q")  # LSNs
