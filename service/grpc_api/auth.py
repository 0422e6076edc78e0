"""Bearer-token check for every gRPC call: a server interceptor over the configured read and admin
tokens (either may read; every ChangeFeed method is a read). The health service stays open for
probes. No token configured: nothing is checked.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable

import grpc
from grpc_health.v1 import health

from service.config import Settings

__all__ = ["OPEN_SERVICES", "TokenInterceptor"]

OPEN_SERVICES = frozenset({health.SERVICE_NAME})

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


def _service_of(method: str) -> str:
    """``/pgfeed.v1.ChangeFeed/Subscribe`` -> ``pgfeed.v1.ChangeFeed``."""
    return method.lstrip("/").partition("/")[0]


class TokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Rejects a call with UNAUTHENTICATED unless its ``authorization`` metadata is
    ``Bearer <token>`` for one of ``tokens`` (compared with ``hmac.compare_digest`` against every
    token, no early exit)."""

    def __init__(self, tokens: Iterable[str], open_services: frozenset[str] = OPEN_SERVICES) -> None:
        self._tokens = [t.encode() for t in tokens if t]
        self._open = open_services

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenInterceptor | None:
        tokens = [t.get_secret_value() for t in (*settings.read_tokens, *settings.admin_tokens)]
        tokens = [t for t in tokens if t]
        return cls(tokens) if tokens else None

    def allows(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
        """None when the metadata carries a valid token, else why not."""
        header = None
        for key, value in metadata or ():
            if key == "authorization":
                header = value.decode() if isinstance(value, bytes) else value
                break
        if header is None:
            return ("missing credentials: send the metadata 'authorization: Bearer <token>' "
                    "with a read or admin token")
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return "malformed authorization metadata: expected 'Bearer <token>'"
        given = token.strip().encode()
        valid = False
        for known in self._tokens:
            valid |= hmac.compare_digest(given, known)
        return None if valid else "the bearer token is not valid"

    async def intercept_service(self, continuation: Continuation,
                                handler_call_details: grpc.HandlerCallDetails,
                                ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        if _service_of(method) in self._open:
            return await continuation(handler_call_details)
        refusal = self.allows(handler_call_details.invocation_metadata)
        if refusal is None:
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        return _deny(handler, refusal)


def _deny(handler: grpc.RpcMethodHandler | None, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that fails with UNAUTHENTICATED."""
    async def abort(request: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def abort_stream(request: object, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)
        yield  # pragma: no cover - makes this an async generator

    if handler is None:
        return grpc.unary_unary_rpc_method_handler(abort)
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort_stream)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort_stream)
    return grpc.unary_unary_rpc_method_handler(abort)
