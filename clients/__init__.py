"""pgfeed client library: read feeds over HTTP or gRPC, sync or async."""

from clients._cursor import EARLIEST, Cursor, CursorError, format_lsn, parse_cursor, parse_lsn

__all__ = ["EARLIEST", "Cursor", "CursorError", "format_lsn", "parse_cursor", "parse_lsn"]
