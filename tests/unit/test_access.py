"""One access rule for both surfaces (service/pgfeed/access.py)."""

from __future__ import annotations

from pydantic import SecretStr

from pgfeed.access import FEED_STATUS, Tokens, grants, grpc_scope
from pgfeed.config import Settings


def test_feed_status_is_administration_on_grpc_as_on_http() -> None:
    assert FEED_STATUS == "admin"
    assert grpc_scope("/pgfeed.v1.ChangeFeed/Subscribe") == "read"
    assert grpc_scope("/pgfeed.v1.ChangeFeed/ListFeeds") == grpc_scope("/pgfeed.v1.ChangeFeed/GetFeed") == "admin"
    assert grpc_scope("/pgfeed.v1.ChangeFeed/SomethingNew") == "admin"  # closed by default
    assert grpc_scope("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo") == "read"
    assert grants("admin", "admin") and grants("admin", "read") and grants("read", "read")
    assert not grants("read", "admin")


def test_tokens_map_to_their_scope() -> None:
    tokens = Tokens(Settings(read_tokens=[SecretStr("r")], admin_tokens=[SecretStr("a"), SecretStr("")]))
    assert tokens.enabled
    assert (tokens.scope_of("r"), tokens.scope_of("a"), tokens.scope_of(""), tokens.scope_of("x")) == \
        ("read", "admin", None, None)
    assert not Tokens(Settings()).enabled
