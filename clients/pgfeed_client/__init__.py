"""pgfeed client library: read feeds over HTTP or gRPC, sync or async."""

from typing import Any as _Any

from pgfeed_client._cursor import EARLIEST, Cursor, CursorError, format_lsn, parse_cursor, parse_lsn
from pgfeed_client._debezium import DebeziumPage
from pgfeed_client._http_async import AsyncFeedClient
from pgfeed_client._http_base import RetryPolicy
from pgfeed_client._http_sync import FeedClient
from pgfeed_client._json import JSON_NULL, JsonNull
from pgfeed_client._models import Change, ColumnInfo, Page, TableInfo, Transaction, TransactionPage
from pgfeed_client.errors import (
    ClientError,
    CursorExpired,
    FeedNotFound,
    InvalidCursor,
    TransportFailed,
    Unauthorized,
)

__all__ = [
    "EARLIEST",
    "JSON_NULL",
    "AsyncFeedClient",
    "AsyncGrpcFeedClient",
    "Change",
    "ClientError",
    "ColumnInfo",
    "Cursor",
    "CursorError",
    "CursorExpired",
    "DebeziumPage",
    "FeedClient",
    "FeedNotFound",
    "GrpcFeedClient",
    "InvalidCursor",
    "JsonNull",
    "Page",
    "RetryPolicy",
    "TableInfo",
    "Transaction",
    "TransactionPage",
    "TransportFailed",
    "Unauthorized",
    "format_lsn",
    "parse_cursor",
    "parse_lsn",
]

# The gRPC clients need grpcio and the generated pgfeed.v1 stubs; Spark executors need neither,
# so they are imported on first use.
_LAZY = {"GrpcFeedClient", "AsyncGrpcFeedClient"}


def __getattr__(name: str) -> _Any:
    if name in _LAZY:
        try:
            from pgfeed_client import _grpc
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] not in ("grpc", "google"):
                raise
            raise ModuleNotFoundError(
                f"{name} needs the gRPC extra (grpcio, protobuf): pip install "
                f"'pgfeed-client[grpc]' (missing module: {exc.name})", name=exc.name) from None

        value = getattr(_grpc, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pgfeed_client' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LAZY)
