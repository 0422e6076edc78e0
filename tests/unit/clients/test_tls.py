"""The clients' TLS settings: httpx's default roots in one context a process (a Spark executor
opens a client per read task; loading the roots costs tens of ms each time), still verifying;
a CA bundle read from its file at every client, so a rotated one is picked up."""

from __future__ import annotations

import ssl
from pathlib import Path

import certifi
import pytest

from pgfeed_client import FeedClient
from pgfeed_client._tls import http_verify


def test_the_default_context_is_built_once_and_verifies() -> None:
    context = http_verify(None, None)
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # roots loaded
    assert http_verify(None, None) is context
    with FeedClient("http://127.0.0.1:9"), FeedClient("https://127.0.0.1:9"):
        assert http_verify(None, None) is context


def test_a_ca_bundle_is_read_at_every_client(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_bytes(Path(certifi.where()).read_bytes())
    first, second = http_verify(bundle, None), http_verify(bundle, None)
    assert isinstance(first, ssl.SSLContext) and first is not second
    bundle.write_text("not a certificate\n")
    with pytest.raises(ssl.SSLError):
        http_verify(bundle, None)
