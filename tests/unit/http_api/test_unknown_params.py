"""A misspelled query parameter is a 422 that names it (and the nearest one the endpoint takes),
never silently ignored; what an endpoint takes is its own declaration."""

from __future__ import annotations

import httpx

from tests.fixtures.fix_http import OfflineService, error_body


def test_unknown_query_parameters_are_a_422_naming_them(offline: OfflineService) -> None:
    base = offline.url
    error = error_body(httpx.get(f"{base}/v1/feeds/shop/changes", params={"table": "public.orders"}), 422)
    assert error["code"] == "unknown_parameter"
    assert error["message"] == ("unknown query parameter 'table' (did you mean 'tables'?); this "
                                "endpoint takes: after, format, limit, ops, tables, to, wait")
    # several at once, on any /v1 route, each route with its own list
    error = error_body(httpx.get(f"{base}/v1/feeds/shop/splits", params={"n": 2, "form": 1, "x": 1}), 422)
    assert error["message"].startswith("unknown query parameters 'form' (did you mean 'from'?), 'x';")
    assert error_body(httpx.get(f"{base}/v1/feeds", params={"all": 1}), 422)["code"] == "unknown_parameter"
    assert error_body(httpx.delete(f"{base}/v1/feeds/shop", params={"forse": "true"}), 422)[
        "message"].startswith("unknown query parameter 'forse' (did you mean 'force'?)")
    # what the endpoints declare still works, and pages and probes take anything
    assert httpx.get(f"{base}/v1/feeds/shop/changes", params={"tables": "public.orders"}).status_code == 200
    assert httpx.get(f"{base}/v1/feeds/shop/changes?after=earliest&limit=5&wait=0").status_code == 200
    assert httpx.get(f"{base}/healthz", params={"probe": 1}).status_code == 200
    assert offline.supervisor.names() == ["quiet", "shop"]  # the DELETE did nothing
