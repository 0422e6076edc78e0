"""TLS for the HTTP and gRPC listeners, from three settings: ``tls_cert_file`` and
``tls_key_file`` (PEM; both or neither) turn TLS on for both listeners, which then refuse
plaintext; ``tls_client_ca_file`` additionally requires every client to present a certificate
signed by that CA (mutual TLS)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["TlsFiles", "grpc_credentials", "tls_files", "uvicorn_options"]


@dataclass(frozen=True, slots=True)
class TlsFiles:
    cert: Path
    key: Path
    client_ca: Path | None = None


def tls_files(cert: Path | None, key: Path | None, client_ca: Path | None) -> TlsFiles | None:
    """The listeners' TLS files, or None for plaintext; a half-given or unreadable set is a
    ``ValueError`` naming what is wrong (at startup, not at the first client)."""
    if cert is None and key is None:
        if client_ca is not None:
            raise ValueError("tls_client_ca_file needs tls_cert_file and tls_key_file")
        return None
    if cert is None or key is None:
        raise ValueError("TLS needs both tls_cert_file and tls_key_file")
    for name, path in (("tls_cert_file", cert), ("tls_key_file", key),
                       ("tls_client_ca_file", client_ca)):
        if path is not None and not Path(path).is_file():
            raise ValueError(f"{name}: no such file: {path}")
    files = TlsFiles(Path(cert), Path(key), None if client_ca is None else Path(client_ca))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # fail now on a bad pair, with its reason
    try:
        context.load_cert_chain(files.cert, files.key)
        if files.client_ca is not None:
            context.load_verify_locations(files.client_ca)
    except ssl.SSLError as exc:
        raise ValueError(f"the TLS certificate, key or client CA cannot be loaded: {exc}") from None
    return files


def uvicorn_options(files: TlsFiles | None) -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.Config`` for ``files`` (none for plaintext)."""
    if files is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": str(files.cert), "ssl_keyfile": str(files.key)}
    if files.client_ca is not None:
        options |= {"ssl_ca_certs": str(files.client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return options


def grpc_credentials(files: TlsFiles) -> Any:
    """``grpc.ServerCredentials`` for ``files`` (client certificates required with a client CA)."""
    import grpc

    client_ca = None if files.client_ca is None else files.client_ca.read_bytes()
    return grpc.ssl_server_credentials([(files.key.read_bytes(), files.cert.read_bytes())],
                                       root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)
