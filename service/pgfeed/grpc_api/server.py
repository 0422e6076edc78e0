"""The gRPC server: ChangeFeed servicer, standard health service and reflection, token check, and
a graceful stop that ends live streams instead of waiting on them.

``build_server(supervisor, settings, metrics)`` returns a ``grpc.aio.Server``; the caller adds the
port and starts it, and later awaits ``stop(grace)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

from pgfeed.config import Settings
from pgfeed.feeds.supervisor import Supervisor
from pgfeed.grpc_api.auth import TokenInterceptor
from pgfeed.grpc_api.observe import StatusInterceptor
from pgfeed.grpc_api.servicer import ChangeFeedServicer
from pgfeed.metrics import Metrics
from pgfeed_proto.v1 import feed_pb2

__all__ = ["SERVICE_NAME", "FeedServer", "build_server"]

SERVICE_NAME = feed_pb2.DESCRIPTOR.services_by_name["ChangeFeed"].full_name  # pgfeed.v1.ChangeFeed
# A frame is well under 4 MiB; requests are tiny. Keepalives notice dead subscribers. No
# SO_REUSEPORT (grpcio sets it by default): a second server on the same port would otherwise
# listen too, and calls would be answered by either (issue 26).
_OPTIONS = (
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", 4 * 1024 * 1024),
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.keepalive_permit_without_calls", 1),
)


def _change_feed_handler(servicer: ChangeFeedServicer) -> grpc.GenericRpcHandler:
    """The ChangeFeed methods, as ``feed_pb2_grpc.add_ChangeFeedServicer_to_server`` registers
    them except that Subscribe's responses are already serialized ``Transaction`` frames
    (``encoding.to_proto`` writes the wire format directly; same bytes on the wire)."""
    handlers = {
        "Subscribe": grpc.unary_stream_rpc_method_handler(
            servicer.Subscribe, request_deserializer=feed_pb2.SubscribeRequest.FromString,
            response_serializer=None),  # frames pass through as they are
        "ListFeeds": grpc.unary_unary_rpc_method_handler(
            servicer.ListFeeds, request_deserializer=feed_pb2.ListFeedsRequest.FromString,
            response_serializer=feed_pb2.ListFeedsResponse.SerializeToString),
        "GetFeed": grpc.unary_unary_rpc_method_handler(
            servicer.GetFeed, request_deserializer=feed_pb2.GetFeedRequest.FromString,
            response_serializer=feed_pb2.Feed.SerializeToString),
    }
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def build_server(supervisor: Supervisor, settings: Settings,
                 metrics: Metrics | None = None) -> FeedServer:
    """A grpc.aio server with ChangeFeed, grpc.health.v1 (SERVING for "" and
    ``pgfeed.v1.ChangeFeed`` once started) and reflection, behind the bearer-token interceptor
    when tokens are configured. Call it inside the event loop that will run it."""
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if metrics is not None:  # outermost: it sees the token check's refusals too
        interceptors.append(StatusInterceptor(metrics))
    token_check = TokenInterceptor.from_settings(settings)
    if token_check is not None:
        interceptors.append(token_check)
    server = grpc.aio.server(interceptors=interceptors or None, options=_OPTIONS)
    servicer = ChangeFeedServicer(supervisor, metrics)
    server.add_generic_rpc_handlers((_change_feed_handler(servicer),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflector = reflection.aio.ReflectionServicer(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME, REFLECTION_V1))
    server.add_generic_rpc_handlers(tuple(
        _reflection_handler(name, reflector) for name in (reflection.SERVICE_NAME, REFLECTION_V1)))
    return FeedServer(server, servicer, health_servicer)


# grpc.reflection.v1 (what current grpcurl, Postman and grpc-js tools ask first) is v1alpha under
# another package name: the same messages, field for field, so one servicer answers both.
# grpcio-reflection ships only v1alpha.
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"


def _reflection_handler(service: str, reflector: Any) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(service, {
        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
            reflector.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString)})


class FeedServer(grpc.aio.Server):  # type: ignore[misc]
    """A ``grpc.aio.Server`` that marks itself SERVING when started and, on ``stop``, first
    reports NOT_SERVING and ends every live Subscribe with UNAVAILABLE (they would otherwise hold
    the whole grace period: a caught-up stream waits for commits, not for the server)."""

    def __init__(self, server: grpc.aio.Server, servicer: ChangeFeedServicer,
                 health_servicer: health.aio.HealthServicer) -> None:
        self.server = server
        self.servicer = servicer
        self.health = health_servicer

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self.server.add_generic_rpc_handlers(generic_rpc_handlers)

    def add_registered_method_handlers(self, service_name: str, method_handlers: Any) -> None:
        self.server.add_registered_method_handlers(service_name, method_handlers)

    def add_insecure_port(self, address: str) -> int:
        return int(self.server.add_insecure_port(address))

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int:
        return int(self.server.add_secure_port(address, server_credentials))

    async def start(self) -> None:
        serving = health_pb2.HealthCheckResponse.SERVING
        await self.health.set("", serving)
        await self.health.set(SERVICE_NAME, serving)
        await self.server.start()

    async def stop(self, grace: float | None) -> None:
        await self.health.enter_graceful_shutdown()
        self.servicer.shut_down()
        await self.server.stop(grace)

    async def wait_for_termination(self, timeout: float | None = None) -> bool:
        return bool(await self.server.wait_for_termination(timeout))
