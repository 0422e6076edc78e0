"""Serving rules that need no PostgreSQL, through real servers on loopback: bearer tokens on HTTP
and gRPC, 410 for a cursor older than retention, and schemathesis over /openapi.json."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from pgfeed.v1 import feed_pb2, feed_pb2_grpc

from service.feeds.model import FeedOptions
from tests.fixtures.fix_http import OfflineService, run_offline
from tests.fixtures.fix_service import run_service
from tests.unit.changelog.txns import txn

READ, ADMIN = "read-token-1", "admin-token-1"


def _seed(svc: OfflineService, feed: str = "shop") -> None:
    svc.supervisor.changelog(feed).append([txn(i * 10_000, 5, schema=i == 1, ts=i) for i in range(1, 21)])


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[OfflineService]:
    with run_offline(tmp_path / "data", {"shop": FeedOptions()}, read_tokens=[READ],
                     admin_tokens=[ADMIN]) as svc:
        _seed(svc)
        yield svc


def _auth(token: str | None) -> dict[str, str]:
    return {} if token is None else {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(("token", "read", "admin"), [
    (None, 401, 401), ("wrong", 401, 401), (READ, 200, 403), (ADMIN, 200, 200)])
def test_http_token_scopes(guarded: OfflineService, token: str | None, read: int, admin: int) -> None:
    with httpx.Client(base_url=guarded.url, headers=_auth(token), timeout=30) as client:
        r = client.get("/v1/feeds/shop/changes")
        a = client.get("/v1/feeds")
        assert (r.status_code, a.status_code) == (read, admin)
        for response in (r, a):
            if response.status_code == 401:
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
            if response.status_code >= 400:
                assert response.json()["error"]["code"] in ("unauthorized", "forbidden")
        assert client.get("/healthz").status_code == 200  # probes stay open
        assert client.get("/metrics").status_code == 200


def test_grpc_tokens(tmp_path: Path) -> None:
    with run_service(tmp_path / "svc", read_tokens=[READ], admin_tokens=[ADMIN]) as service, \
            grpc.insecure_channel(service.grpc_target) as channel:
        stub = feed_pb2_grpc.ChangeFeedStub(channel)
        for metadata in ((), (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as denied:
                stub.ListFeeds(feed_pb2.ListFeedsRequest(), metadata=metadata, timeout=10)
            assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "bearer" in (denied.value.details() or "").lower()
        for token in (READ, ADMIN):
            answer = stub.ListFeeds(feed_pb2.ListFeedsRequest(), timeout=10,
                                    metadata=(("authorization", f"Bearer {token}"),))
            assert list(answer.feeds) == []
        with pytest.raises(grpc.RpcError) as missing:  # authenticated, then a clear NOT_FOUND
            next(iter(stub.Subscribe(feed_pb2.SubscribeRequest(feed="nope"), timeout=10,
                                     metadata=(("authorization", f"Bearer {READ}"),))))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_cursor_older_than_retention_is_410_with_the_oldest_position(
        guarded: OfflineService) -> None:
    log = guarded.supervisor.changelog("shop")
    log.trim(50_001, force=True)
    with httpx.Client(base_url=guarded.url, headers=_auth(READ), timeout=30) as client:
        gone = client.get("/v1/feeds/shop/changes", params={"after": "0/4E20"})  # 20,000
        assert gone.status_code == 410
        error = gone.json()["error"]
        assert error["code"] == "cursor_expired" and "0/EA60" in error["message"]  # 60,000: oldest kept
        ok = client.get("/v1/feeds/shop/changes", params={"after": "earliest"}).json()
        assert ok["changes"][0]["commit_lsn"] == "0/EA60"


# -- schemathesis over the OpenAPI document --------------------------------------------------------

@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OfflineService]:
    with run_offline(tmp_path_factory.mktemp("schemathesis"),
                     {"shop": FeedOptions(), "quiet": FeedOptions(toast="omit")},
                     read_tokens=[READ], admin_tokens=[ADMIN]) as svc:
        _seed(svc)
        yield svc


def test_openapi_contract_holds(api: OfflineService) -> None:
    """Generated requests for every operation: no 5xx, and every answer matches the document.
    (Hypothesis is driven per operation here: schemathesis' lazy pytest loader does not work
    with this pytest.)"""
    schema = schemathesis.openapi.from_url(f"{api.url}/openapi.json")
    checked = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if (operation.method.upper(), operation.path) == ("POST", "/v1/feeds"):
            continue  # creating a feed connects to the generated DSN: keep this test on loopback

        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def check(case: Any) -> None:
            if case.query and "wait" in case.query:  # long-polls on an idle feed only slow the run
                case.query["wait"] = 0
            response = case.call(base_url=api.url, headers=_auth(ADMIN), timeout=30)
            assert response.status_code < 500, (f"{case.method} {case.formatted_path} -> "
                                                f"{response.status_code}: {response.text[:500]}")
            case.validate_response(response)

        check()
        checked.append(f"{operation.method.upper()} {operation.path}")
    assert {"GET /v1/feeds/{feed}/changes", "PUT /v1/feeds/{feed}/consumers/{name}",
            "PATCH /v1/feeds/{feed}", "DELETE /v1/feeds/{feed}"} <= set(checked)
