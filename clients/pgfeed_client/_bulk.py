"""Large answers (Arrow pages) read straight into one buffer.

An Arrow page is tens of megabytes, and httpx hands a body over through h11 in 64 KiB pieces,
copying each byte about four times on the way (httpcore's reads, h11's receive buffer, the
pieces it cuts from it, httpx's join): in a Spark executor that was most of the Python worker's
CPU for a read. Here the status line and headers go through ``http.client`` and the body is read
with ``readinto`` into a buffer of its Content-Length, one copy from the socket. Only for plain
GETs of a client without a custom transport or a proxy (``BulkReader.usable``): anything else
keeps httpx. Failures surface as httpx's own exceptions, and error answers as an
``httpx.Response``, so the client's retry and error mapping treat both paths alike.
"""

from __future__ import annotations

import http.client
import ssl
import urllib.request
from collections.abc import Mapping
from typing import Any

import httpx

__all__ = ["BulkReader"]


class BulkReader:
    """GETs on one keep-alive connection to the client's server; one reader a read (not shared
    between threads)."""

    def __init__(self, base_url: str, headers: Mapping[str, str], verify: ssl.SSLContext | bool,
                 timeout: float) -> None:
        self._url = httpx.URL(base_url)
        self._headers = {k: v for k, v in headers.items() if k.lower() != "accept-encoding"}
        self._context = verify if isinstance(verify, ssl.SSLContext) else None
        self._timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    @staticmethod
    def usable(base_url: str, custom_transport: bool) -> bool:
        """Whether the reader reaches the server as httpx would: not through a custom transport
        (tests' mock ones) nor a proxy from the environment."""
        scheme = httpx.URL(base_url).scheme
        return not custom_transport and scheme in ("http", "https") \
            and not urllib.request.getproxies()

    def get(self, path: str, params: Mapping[str, Any]) -> tuple[httpx.Response, memoryview]:
        """``GET base_url + path?params``: the answer's status and headers, and its body (for an
        error answer, the response carries the body too, for the client's error mapping)."""
        url = self._url.join(self._url.path.rstrip("/") + path).copy_with(
            params=httpx.QueryParams(params))
        request = httpx.Request("GET", url)
        try:
            conn = self._connection()
            conn.request("GET", url.raw_path.decode("ascii"), headers=self._headers)
            answer = conn.getresponse()
            headers = httpx.Headers(answer.getheaders())
            body = _body(answer)
            if answer.will_close:
                self.close()
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            if isinstance(exc, TimeoutError):
                raise httpx.ReadTimeout(str(exc) or "timed out", request=request) from exc
            raise httpx.ReadError(f"{type(exc).__name__}: {exc}", request=request) from exc
        response = httpx.Response(answer.status, headers=headers, request=request,
                                  content=b"" if answer.status < 300 else bytes(body))
        return response, body

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            url = self._url
            if url.scheme == "https":
                self._conn = http.client.HTTPSConnection(url.host, url.port, timeout=self._timeout,
                                                         context=self._context)
            else:
                self._conn = http.client.HTTPConnection(url.host, url.port, timeout=self._timeout)
        return self._conn


def _body(answer: http.client.HTTPResponse) -> memoryview:
    """The whole body: into one buffer of its Content-Length when there is one."""
    length = answer.getheader("content-length")
    if length is None or not length.isdigit():
        return memoryview(answer.read())
    buffer = memoryview(bytearray(int(length)))
    got = 0
    while got < len(buffer):
        n = answer.readinto(buffer[got:])
        if not n:
            raise http.client.IncompleteRead(bytes(buffer[:got]), len(buffer) - got)
        got += n
    return buffer
