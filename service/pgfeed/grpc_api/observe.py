"""Every gRPC call's final status, counted by method and code (``pgfeed_requests_total``): the
outermost interceptor, so calls the token check refuses count too. It only registers a done
callback on the call's context; the handler runs as it is."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from pgfeed.metrics import Metrics

__all__ = ["StatusInterceptor"]

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]


class StatusInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    async def intercept_service(self, continuation: Continuation,
                                handler_call_details: grpc.HandlerCallDetails,
                                ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        endpoint = handler_call_details.method.rpartition("/")[2]  # Subscribe, GetFeed, ...

        def counted(behavior: Callable[..., Any]) -> Callable[..., Any]:
            # grpc.aio runs a handler by its kind (coroutine, async generator): keep the kind
            def watch(context: grpc.aio.ServicerContext) -> None:
                context.add_done_callback(lambda ctx: self._count(endpoint, ctx))

            if inspect.isasyncgenfunction(behavior):
                async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                    watch(context)
                    async for item in behavior(request, context):
                        yield item
                return stream

            if not inspect.iscoroutinefunction(behavior):
                return behavior  # a synchronous handler (none of ours): not counted

            async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
                watch(context)
                return await behavior(request, context)
            return call

        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                counted(handler.unary_unary), request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                counted(handler.unary_stream), request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer)
        return handler  # client-streaming methods (reflection): not counted

    def _count(self, endpoint: str, context: grpc.aio.ServicerContext) -> None:
        code = grpc.StatusCode.CANCELLED if context.cancelled() else (context.code() or grpc.StatusCode.OK)
        name = code.name if isinstance(code, grpc.StatusCode) else str(code)
        self.metrics.requests.labels(surface="grpc", endpoint=endpoint, code=name).inc()
