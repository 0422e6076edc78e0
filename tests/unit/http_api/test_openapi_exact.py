"""The OpenAPI document is exact: schemathesis, with every check including "schema-valid requests
are accepted", finds no 5xx and no answer off the document. (test_http.py's schemathesis run
also sends negative data and skips that check; this one keeps the document from being looser
than the server.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from pgfeed.feeds.model import FeedOptions
from tests.fixtures.fix_http import OfflineService, run_offline
from tests.unit.changelog.txns import txn

READ, ADMIN = "read-token-1", "admin-token-1"


def _seed(svc: OfflineService, feed: str = "shop") -> None:
    svc.supervisor.changelog(feed).append([txn(i * 10_000, 5, schema=i == 1, ts=i) for i in range(1, 21)])


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
            response = case.call(base_url=api.url, headers={"Authorization": f"Bearer {ADMIN}"},
                                 timeout=30)
            assert response.status_code < 500, (f"{case.method} {case.formatted_path} -> "
                                                f"{response.status_code}: {response.text[:500]}")
            case.validate_response(response)

        check()
        checked.append(f"{operation.method.upper()} {operation.path}")
    assert {"GET /v1/feeds/{feed}/changes", "PUT /v1/feeds/{feed}/consumers/{name}",
            "PATCH /v1/feeds/{feed}", "DELETE /v1/feeds/{feed}"} <= set(checked)
