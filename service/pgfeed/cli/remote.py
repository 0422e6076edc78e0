"""The flags of the commands that talk to a running service (``pgfeed feeds …``,
``consumers …``, ``tail``, ``backfill``): where it is, the bearer token and the CAs of an https
URL, each with its environment variable; written once so the commands cannot drift apart."""

from __future__ import annotations

import argparse
import os

from pgfeed.config import Settings

__all__ = ["DEFAULT_URL", "add_service_flags", "bearer_headers", "bearer_token"]

_DEFAULTS = Settings.model_fields
DEFAULT_URL = f"http://{_DEFAULTS['http_host'].default}:{_DEFAULTS['http_port'].default}"


def add_service_flags(p: argparse.ArgumentParser, *,
                      token: str = "admin bearer token") -> argparse.ArgumentParser:
    """``--url`` (PGFEED_URL), ``--token`` (PGFEED_TOKEN, described as ``token``) and
    ``--ca-bundle`` (PGFEED_CA_BUNDLE)."""
    p.add_argument("--url", default=os.environ.get("PGFEED_URL", DEFAULT_URL),
                   help=f"the service (or PGFEED_URL; default {DEFAULT_URL})")
    p.add_argument("--token", help=f"{token} (or PGFEED_TOKEN)")
    p.add_argument("--ca-bundle", default=os.environ.get("PGFEED_CA_BUNDLE"),
                   help="PEM CAs to trust for an https --url (or PGFEED_CA_BUNDLE)")
    return p


def bearer_token(args: argparse.Namespace) -> str | None:
    """``--token``, else PGFEED_TOKEN (read when the command runs, not when it is parsed)."""
    token: str | None = args.token or os.environ.get("PGFEED_TOKEN")
    return token


def bearer_headers(args: argparse.Namespace) -> dict[str, str]:
    """The Authorization header of ``bearer_token``, or none."""
    token = bearer_token(args)
    return {"Authorization": f"Bearer {token}"} if token else {}
