"""GrpcFeedClient and AsyncGrpcFeedClient on the generated ``pgfeed.v1`` stubs.

``subscribe`` yields whole transactions (frames with ``final=false`` reassembled), with LSNs in
PostgreSQL's text form and typed ``Value``s turned into Python values (see ``from_value``); after
UNAVAILABLE it reconnects with backoff and resumes from the last whole transaction yielded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from typing import Any, Self

import grpc

from pgfeed_client._cursor import format_lsn
from pgfeed_client._headers import OLDEST_METADATA
from pgfeed_client._http_base import CursorLike, RetryPolicy
from pgfeed_client._json import JSON_NULL, embeddable, json_nulls, loads_exact
from pgfeed_client._models import Change, Transaction
from pgfeed_client._tls import ClientCert, PathLike, grpc_channel_credentials
from pgfeed_client.errors import (
    ClientError,
    CursorExpired,
    FeedNotFound,
    InvalidCursor,
    TransportFailed,
    Unauthorized,
    oldest_in_text,
)

__all__ = ["OLDEST_METADATA", "AsyncGrpcFeedClient", "GrpcFeedClient", "from_value"]

# A frame stays under 4 MiB, but a single change larger than that is sent whole.
_CHANNEL_OPTIONS = (("grpc.max_receive_message_length", -1),)


def _stubs() -> tuple[Any, Any]:
    from pgfeed_proto.v1 import feed_pb2, feed_pb2_grpc

    return feed_pb2, feed_pb2_grpc


# -- typed Value -> Python ---------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAIVE_EPOCH = datetime(1970, 1, 1)


def _timestamp(ts: Any, epoch: datetime) -> datetime:
    return epoch + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


_FROM: dict[str, Callable[[Any], Any]] = {
    "null_value": lambda v: None,
    "bool_value": lambda v: v.bool_value,
    "int_value": lambda v: v.int_value,
    "double_value": lambda v: v.double_value,
    "string_value": lambda v: v.string_value,
    "bytes_value": lambda v: v.bytes_value,
    "numeric_value": lambda v: Decimal(v.numeric_value),
    "timestamp_value": lambda v: _timestamp(v.timestamp_value, _EPOCH),
    "local_timestamp_value": lambda v: _timestamp(v.local_timestamp_value, _NAIVE_EPOCH),
    "json_value": lambda v: json_document(v.json_value),
    "list_value": lambda v: [from_value(x) for x in v.list_value.values],
    "date_value": lambda v: date.fromisoformat(v.date_value),
    "time_value": lambda v: dtime.fromisoformat(v.time_value),
    "interval_value": lambda v: v.interval_value,
}


def json_document(text: str) -> Any:
    """A ``json_value`` (the document exactly as PostgreSQL printed it) parsed with exact numbers
    (``_json.loads_exact``); a document nested past ``MAX_EMBEDDED_DEPTH`` stays its text, as
    the HTTP feed serves it."""
    if text == "null":
        return JSON_NULL  # the document null; SQL NULL is null_value (None)
    return loads_exact(text) if embeddable(text) else text


def from_value(value: Any) -> Any:
    """A ``pgfeed.v1.Value`` -> Python: None, bool, int, float (NaN/±inf/-0.0 included), str,
    bytes, Decimal (numeric), aware datetime (timestamptz), naive datetime (timestamp), date,
    time (timetz with its tzinfo), str (interval, ISO 8601 duration), parsed JSON (json/jsonb:
    ``json_document``; ``value.json_value`` holds PostgreSQL's text),
    list (arrays). Values PostgreSQL can hold but these types cannot ('infinity', BC dates) come
    as their PostgreSQL text form."""
    kind = value.WhichOneof("kind")
    if kind is None:
        return None
    return _FROM[kind](value)


def _row(row: Any) -> dict[str, Any] | None:
    """A ``map<string, Value>``; empty means absent (maps have no presence in proto3)."""
    if not row:
        return None
    return {k: from_value(v) for k, v in row.items()}


_OPS = {1: "insert", 2: "update", 3: "delete", 4: "truncate", 5: "message", 6: "read", 7: "ddl"}


def _ddl(msg: Any) -> dict[str, Any]:
    """A ``pgfeed.v1.Ddl`` as the JSON event's ``ddl`` object (equal on both transports)."""
    out: dict[str, Any] = {"command": msg.command, "object_type": msg.object_type or None,
                           "object": msg.object or None, "table": msg.table}
    if msg.HasField("old_name"):
        out["old_name"] = msg.old_name
        out["new_name"] = msg.new_name if msg.HasField("new_name") else None
    columns = []
    for c in msg.columns:
        col: dict[str, Any] = {"attnum": c.attnum, "name": c.name, "type": c.type,
                               "type_oid": c.type_oid, "not_null": c.not_null,
                               "default": c.default if c.HasField("default") else None}
        if c.generated:
            col["generated"] = c.generated
        if c.identity:
            col["identity"] = c.identity
        if c.added:
            col["added"] = True
        if c.HasField("previous_name"):
            col["previous_name"] = c.previous_name
        if c.HasField("missing_value"):
            col["missing_value"] = from_value(c.missing_value)
        columns.append(col)
    out["columns"] = columns
    return out


def _change(msg: Any, commit_lsn: str, xid: int, commit_ts: datetime | None,
            origin: str | None) -> Change:
    op = _OPS.get(msg.op, "unspecified")
    after = _row(msg.after)
    if after is None and op in ("insert", "update", "read"):
        after = {}  # a row of a table without columns
    key, before = _row(msg.key), _row(msg.before)
    return Change(
        lsn=format_lsn(msg.lsn), seq=msg.seq, commit_lsn=commit_lsn, xid=xid, commit_ts=commit_ts,
        op=op, schema=msg.schema or None, table=msg.table or None, key=key,
        before=before, after=after, unchanged_toast=list(msg.unchanged_toast),
        origin=origin,
        prefix=msg.prefix if op == "message" else None,
        content=msg.content if op == "message" else None,
        transactional=msg.transactional if op == "message" else None,
        tables=list(msg.tables) if op == "truncate" else None,
        options=dict(msg.options) if op == "truncate" else None,
        toast_filled=list(msg.toast_filled) or None,
        table_version=msg.table_version or None,
        json_null=json_nulls({"key": key, "before": before, "after": after}),
        ddl=_ddl(msg.ddl) if op == "ddl" else None,
    )


def _transaction(frames: list[Any]) -> Transaction:
    last = frames[-1]
    commit_lsn = format_lsn(last.commit_lsn)
    commit_ts = _timestamp(last.commit_ts, _EPOCH) if last.HasField("commit_ts") else None
    origin = last.origin if last.HasField("origin") else None
    changes = [_change(c, commit_lsn, last.xid, commit_ts, origin)
               for f in frames for c in f.changes]
    return Transaction(xid=last.xid, commit_lsn=commit_lsn, end_lsn=format_lsn(last.end_lsn),
                       commit_ts=commit_ts, origin=origin, changes=changes,
                       change_count=len(changes), cursor=last.cursor or commit_lsn)


class _Reassembler:
    """Collect the frames of one transaction until its final frame."""

    def __init__(self) -> None:
        self._frames: list[Any] = []

    def push(self, frame: Any) -> Transaction | None:
        if self._frames and frame.commit_lsn != self._frames[0].commit_lsn:
            self._frames = []  # a stray partial transaction (cannot happen on a sane stream)
        self._frames.append(frame)
        if not frame.final:
            return None
        frames, self._frames = self._frames, []
        return _transaction(frames)


# -- errors ------------------------------------------------------------------------------------------

def _trailing(exc: grpc.RpcError, key: str) -> str | None:
    try:
        metadata = exc.trailing_metadata() or ()
    except Exception:  # noqa: BLE001 - not every RpcError carries metadata
        return None
    for k, v in metadata:
        if k == key:
            return v.decode() if isinstance(v, bytes) else str(v)
    return None


def _error(exc: grpc.RpcError) -> ClientError:
    code = exc.code() if hasattr(exc, "code") else None
    message = (exc.details() if hasattr(exc, "details") else None) or str(exc)
    kwargs: dict[str, Any] = {"code": code.name.lower() if code is not None else "unknown"}
    if code == grpc.StatusCode.NOT_FOUND:
        return FeedNotFound(message, **kwargs)
    if code == grpc.StatusCode.OUT_OF_RANGE:
        oldest = _trailing(exc, OLDEST_METADATA) or oldest_in_text(message)
        return CursorExpired(message, oldest=oldest, **kwargs)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidCursor(message, **kwargs)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return Unauthorized(message, **kwargs)
    if code == grpc.StatusCode.UNAVAILABLE:
        return TransportFailed(message, **kwargs)
    return ClientError(message, **kwargs)


def _retryable(exc: grpc.RpcError) -> bool:
    return hasattr(exc, "code") and exc.code() == grpc.StatusCode.UNAVAILABLE


def _metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def _subscribe_request(pb2: Any, feed: str, cursor: str, tables: list[str], ops: list[str]) -> Any:
    return pb2.SubscribeRequest(feed=feed, cursor=cursor, tables=tables, ops=ops)


# -- clients -----------------------------------------------------------------------------------------

class GrpcFeedClient:
    """Synchronous gRPC client: ``subscribe`` replays then tails a feed, transaction by transaction."""

    def __init__(self, target: str, *, token: str | None = None,
                 channel: grpc.Channel | None = None, retry: RetryPolicy | None = None,
                 tls: bool = False, ca_bundle: PathLike | None = None,
                 client_cert: ClientCert | None = None) -> None:
        """``tls`` (implied by ``ca_bundle`` or ``client_cert``): a TLS channel trusting
        ``ca_bundle`` (PEM; default: gRPC's roots), presenting ``client_cert`` (cert, key)."""
        self._pb2, grpc_mod = _stubs()
        if channel is None and (tls or ca_bundle is not None or client_cert is not None):
            channel = grpc.secure_channel(target, grpc_channel_credentials(ca_bundle, client_cert),
                                          options=_CHANNEL_OPTIONS)
        self._channel = channel or grpc.insecure_channel(target, options=_CHANNEL_OPTIONS)
        self._stub = grpc_mod.ChangeFeedStub(self._channel)
        self._metadata = _metadata(token)
        self.retry = retry or RetryPolicy()

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def subscribe(self, feed: str, cursor: CursorLike = "earliest", tables: Iterable[str] = (),
                  ops: Iterable[str] = ()) -> Iterator[Transaction]:
        """Whole transactions after ``cursor``, forever (the stream tails the log). After
        UNAVAILABLE it reconnects with backoff from the last transaction yielded; each
        transaction's ``cursor`` is where to resume after it. With filters, a transaction with
        no changes reports progress past transactions they left out (at most one a second)."""
        position, delays = str(cursor), self.retry.delays()
        table_list, op_list = list(tables), list(ops)
        while True:
            request = _subscribe_request(self._pb2, feed, position, table_list, op_list)
            assembler = _Reassembler()
            try:
                for frame in self._stub.Subscribe(request, metadata=self._metadata):
                    txn = assembler.push(frame)
                    if txn is not None:
                        delays = self.retry.delays()
                        position = txn.cursor or position
                        yield txn
                return
            except grpc.RpcError as exc:
                delay = next(delays, None) if _retryable(exc) else None
                if delay is None:
                    raise _error(exc) from exc
                time.sleep(delay)

    def list_feeds(self) -> list[dict[str, Any]]:
        try:
            reply = self._stub.ListFeeds(self._pb2.ListFeedsRequest(), metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _error(exc) from exc
        return [_feed(f) for f in reply.feeds]

    def get_feed(self, name: str) -> dict[str, Any]:
        try:
            reply = self._stub.GetFeed(self._pb2.GetFeedRequest(name=name), metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _error(exc) from exc
        return _feed(reply)


class AsyncGrpcFeedClient:
    """The asyncio twin of GrpcFeedClient (``grpc.aio``)."""

    def __init__(self, target: str, *, token: str | None = None,
                 channel: grpc.aio.Channel | None = None, retry: RetryPolicy | None = None,
                 tls: bool = False, ca_bundle: PathLike | None = None,
                 client_cert: ClientCert | None = None) -> None:
        self._pb2, grpc_mod = _stubs()
        if channel is None and (tls or ca_bundle is not None or client_cert is not None):
            channel = grpc.aio.secure_channel(
                target, grpc_channel_credentials(ca_bundle, client_cert), options=_CHANNEL_OPTIONS)
        self._channel = channel or grpc.aio.insecure_channel(target, options=_CHANNEL_OPTIONS)
        self._stub = grpc_mod.ChangeFeedStub(self._channel)
        self._metadata = _metadata(token)
        self.retry = retry or RetryPolicy()

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def subscribe(self, feed: str, cursor: CursorLike = "earliest",
                        tables: Iterable[str] = (),
                        ops: Iterable[str] = ()) -> AsyncIterator[Transaction]:
        """As ``GrpcFeedClient.subscribe``."""
        position, delays = str(cursor), self.retry.delays()
        table_list, op_list = list(tables), list(ops)
        while True:
            request = _subscribe_request(self._pb2, feed, position, table_list, op_list)
            assembler = _Reassembler()
            try:
                async for frame in self._stub.Subscribe(request, metadata=self._metadata):
                    txn = assembler.push(frame)
                    if txn is not None:
                        delays = self.retry.delays()
                        position = txn.cursor or position
                        yield txn
                return
            except grpc.RpcError as exc:
                delay = next(delays, None) if _retryable(exc) else None
                if delay is None:
                    raise _error(exc) from exc
                await asyncio.sleep(delay)

    async def list_feeds(self) -> list[dict[str, Any]]:
        try:
            reply = await self._stub.ListFeeds(self._pb2.ListFeedsRequest(),
                                               metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _error(exc) from exc
        return [_feed(f) for f in reply.feeds]

    async def get_feed(self, name: str) -> dict[str, Any]:
        try:
            reply = await self._stub.GetFeed(self._pb2.GetFeedRequest(name=name),
                                             metadata=self._metadata)
        except grpc.RpcError as exc:
            raise _error(exc) from exc
        return _feed(reply)


def _feed(msg: Any) -> dict[str, Any]:
    """A ``pgfeed.v1.Feed`` -> the dict GET /v1/feeds/{feed} gives (LSNs in text form, absent
    optional fields as None)."""
    def opt(m: Any, name: str) -> Any:
        return getattr(m, name) if m.HasField(name) else None

    server_lsn = opt(msg, "server_lsn")
    risk = msg.slot_risk
    return {
        "name": msg.name, "state": msg.state, "source": msg.source, "slot": msg.slot,
        "publication": msg.publication, "tables": list(msg.tables), "all_tables": msg.all_tables,
        "confirmed_lsn": format_lsn(msg.confirmed_lsn), "head_lsn": format_lsn(msg.head_lsn),
        "server_lsn": None if server_lsn is None else format_lsn(server_lsn),
        "lag_bytes": opt(msg, "lag_bytes"), "lag_seconds": opt(msg, "lag_seconds"),
        "changes_per_second": msg.changes_per_second, "changes_captured": msg.changes_captured,
        "bytes_captured": msg.bytes_captured, "last_error": opt(msg, "last_error"),
        "proto_version": opt(msg, "proto_version"),
        "slot_risk": {"wal_status": opt(risk, "wal_status"),
                      "safe_wal_size": opt(risk, "safe_wal_size"),
                      "retained_bytes": opt(risk, "retained_bytes")},
    }
