"""Bearer-token check for every gRPC call: a server interceptor over the configured read and admin
tokens, each method needing the scope ``pgfeed.access`` gives it (the rule HTTP follows too:
Subscribe reads; ListFeeds and GetFeed show feed status, which needs an admin token). The health
service stays open for probes. No token configured: nothing is checked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import grpc
from grpc_health.v1 import health

from pgfeed.access import Scope, Tokens, grants, grpc_scope
from pgfeed.config import Settings

__all__ = ["OPEN_SERVICES", "TokenInterceptor"]

OPEN_SERVICES = frozenset({health.SERVICE_NAME})

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


def _service_of(method: str) -> str:
    """``/pgfeed.v1.ChangeFeed/Subscribe`` -> ``pgfeed.v1.ChangeFeed``."""
    return method.lstrip("/").partition("/")[0]


class TokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Rejects a call with UNAUTHENTICATED unless its ``authorization`` metadata is
    ``Bearer <token>`` for a configured token, and with PERMISSION_DENIED when that token's scope
    does not cover the method."""

    def __init__(self, tokens: Tokens, open_services: frozenset[str] = OPEN_SERVICES) -> None:
        self._tokens = tokens
        self._open = open_services

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenInterceptor | None:
        tokens = Tokens(settings)
        return cls(tokens) if tokens.enabled else None

    def allows(self, metadata: Iterable[tuple[str, str | bytes]] | None,
               needed: Scope = "read") -> tuple[grpc.StatusCode, str] | None:
        """None when the metadata carries a token whose scope covers ``needed``, else the status
        and message to refuse with."""
        header = None
        for key, value in metadata or ():
            if key == "authorization":
                header = value.decode() if isinstance(value, bytes) else value
                break
        if header is None:
            return (grpc.StatusCode.UNAUTHENTICATED,
                    ("missing credentials: send the metadata 'authorization: Bearer <token>' "
                     "with a read or admin token"))
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return (grpc.StatusCode.UNAUTHENTICATED,
                    "malformed authorization metadata: expected 'Bearer <token>'")
        scope = self._tokens.scope_of(token.strip())
        if scope is None:
            return grpc.StatusCode.UNAUTHENTICATED, "the bearer token is not valid"
        if not grants(scope, needed):
            return (grpc.StatusCode.PERMISSION_DENIED,
                    "this method needs an admin token; the bearer token given may only read")
        return None

    async def intercept_service(self, continuation: Continuation,
                                handler_call_details: grpc.HandlerCallDetails,
                                ) -> grpc.RpcMethodHandler | None:
        method = handler_call_details.method
        if _service_of(method) in self._open:
            return await continuation(handler_call_details)
        refusal = self.allows(handler_call_details.invocation_metadata, grpc_scope(method))
        if refusal is None:
            return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        return _deny(handler, *refusal)


def _deny(handler: grpc.RpcMethodHandler | None, code: grpc.StatusCode,
          message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as ``handler`` that fails with ``code``."""
    async def abort(request: object, context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, message)

    async def abort_stream(request: object, context: grpc.aio.ServicerContext):  # type: ignore[no-untyped-def]
        await context.abort(code, message)
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
