"""TLS for the clients: a CA bundle to trust (a private CA, as pgfeed behind a private network
usually has) and, for servers that require one, a client certificate."""

from __future__ import annotations

import functools
import os
import ssl
from pathlib import Path
from typing import Any

__all__ = ["ClientCert", "grpc_channel_credentials", "http_verify"]

PathLike = str | os.PathLike[str]
ClientCert = tuple[PathLike, PathLike]  # (certificate PEM, private key PEM)


def http_verify(ca_bundle: PathLike | None, client_cert: ClientCert | None) -> ssl.SSLContext | bool:
    """httpx's ``verify``: httpx's default roots, in one context a process (shared, never
    changed), unless a CA bundle or client cert is given (then a context of its own, read from
    the files now, so a rotated certificate is picked up by the next client)."""
    if ca_bundle is None and client_cert is None:
        return _default_context()
    context = ssl.create_default_context(cafile=None if ca_bundle is None else os.fspath(ca_bundle))
    if client_cert is not None:
        context.load_cert_chain(os.fspath(client_cert[0]), os.fspath(client_cert[1]))
    return context


@functools.cache
def _default_context() -> ssl.SSLContext:
    """httpx's default context (certifi's roots, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``), built
    once a process: loading the roots costs 20-40 ms of CPU, and a Spark executor opens a client
    for every read task (the driver one for every query plan), http or https."""
    import httpx

    return httpx.create_ssl_context()


def grpc_channel_credentials(ca_bundle: PathLike | None, client_cert: ClientCert | None) -> Any:
    """``grpc.ChannelCredentials`` trusting ``ca_bundle`` (None: gRPC's default roots)."""
    import grpc

    def read(path: PathLike | None) -> bytes | None:
        return None if path is None else Path(path).read_bytes()

    return grpc.ssl_channel_credentials(
        root_certificates=read(ca_bundle),
        private_key=read(client_cert[1]) if client_cert else None,
        certificate_chain=read(client_cert[0]) if client_cert else None)
