"""The reference servers of bench/serve.py: what the same client reads from a server doing no work.

``python bench/ceiling.py http PORT FILE`` answers every GET with FILE's bytes (a pgfeed JSON page
saved by bench/serve.py) from a bare ASGI app on uvicorn; ``python bench/ceiling.py grpc PORT FILE
REPEAT`` answers ``pgfeed.v1.ChangeFeed/Subscribe`` with the frames stored in FILE (length-prefixed
serialized Transactions), REPEAT times over, from a bare grpc.aio server. Neither reads a log,
decodes or encodes: a client's rate against them is the most this machine, these Python server
stacks and that client give, and pgfeed's own figures are read against it.
"""

from __future__ import annotations

import asyncio
import struct
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any


def read_frames(path: Path) -> list[bytes]:
    data, frames, pos = path.read_bytes(), [], 0
    while pos < len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        frames.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return frames


def write_frames(path: Path, frames: list[bytes]) -> None:
    path.write_bytes(b"".join(struct.pack(">I", len(f)) + f for f in frames))


def serve_http(port: int, body: bytes) -> None:
    import uvicorn

    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def serve_grpc(port: int, frames: list[bytes], repeat: int) -> None:
    import grpc

    async def subscribe(request: bytes, context: Any) -> AsyncIterator[bytes]:
        for _ in range(repeat):
            for frame in frames:
                yield frame

    async def main() -> None:
        server = grpc.aio.server()
        handler = grpc.unary_stream_rpc_method_handler(subscribe)  # bytes in, bytes out
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("pgfeed.v1.ChangeFeed", {"Subscribe": handler}),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


if __name__ == "__main__":
    kind, port, file = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    if kind == "http":
        serve_http(port, file.read_bytes())
    else:
        serve_grpc(port, read_frames(file), int(sys.argv[4]))
