"""The HTTP API with no PostgreSQL: served from change logs written directly (``run_offline``),
on a real uvicorn over loopback. Retention's 410, and schemathesis over ``/openapi.json``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import positive_data_acceptance

from pgfeed.feeds.model import FeedOptions
from tests.fixtures.fix_http import OFFLINE_DSN, OfflineService, error_body, run_offline
from tests.unit.changelog.txns import txn

_error = error_body
READ, ADMIN = "read-token-http-1", "admin-token-http-1"


def test_a_cursor_older_than_retention_is_410_naming_the_oldest_position(tmp_path: Path) -> None:
    with run_offline(tmp_path / "data", {"shop": FeedOptions()}) as svc:
        log = svc.supervisor.changelog("shop")
        log.append([txn(n * 0x1000, 4, schema=n == 1, ts=n) for n in range(1, 11)])
        log.trim(0x5000, force=True)  # transactions up to 0/4000 are gone; 0/5000 is the oldest
        with httpx.Client(base_url=svc.url, timeout=30) as client:
            for path, params in (("changes", {"after": "0/2000"}), ("changes", {"after": "0/4000:2"}),
                                 ("transactions", {"after": "0/1000"}),
                                 ("splits", {"from": "0/3FFF"})):
                error = _error(client.get(f"/v1/feeds/shop/{path}", params=params), 410)
                assert error["code"] == "cursor_expired" and error["oldest"] == "0/5000"
                assert "0/5000" in error["message"]
            # From earliest (or from the trim point itself) is still fine: the oldest kept first.
            page = client.get("/v1/feeds/shop/changes", params={"after": "earliest"}).json()
            assert page["changes"][0]["commit_lsn"] == "0/5000" and len(page["changes"]) == 24
            assert client.get("/v1/feeds/shop/changes", params={"after": "0/4000"}).json()["changes"] == \
                page["changes"]


def test_an_unexpected_error_is_a_500_in_the_contracts_shape_on_the_fast_path_and_the_routes(
        tmp_path: Path) -> None:
    """A bug answers 500 with the contract's error body, never a stack trace or the bug's own
    words: on a caught-up long-poll answered ahead of the middleware (``http_api.fastpath``) and
    on a route; both answers are counted in the latency histogram."""
    with run_offline(tmp_path / "data", {"shop": FeedOptions()}) as svc:
        svc.supervisor.changelog("shop").append([txn(0x1000, 2, schema=True)])
        with httpx.Client(base_url=svc.url, timeout=30) as client:
            caught_up = {"after": "0/1000", "wait": "0.1"}
            assert client.get("/v1/feeds/shop/changes", params=caught_up).status_code == 200
            counted = svc.metrics.request_latency.labels(
                surface="http", endpoint="/v1/feeds/{feed}/changes")._sum.get()

            def broken(*args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("s3cr3t internals")

            svc.supervisor.tail("shop").after = broken  # type: ignore[method-assign]
            svc.supervisor.status = broken  # type: ignore[method-assign]
            fast = client.get("/v1/feeds/shop/changes", params=caught_up)
            routed = client.get("/v1/feeds/shop")
            for answer in (fast, routed):
                assert _error(answer, 500)["code"] == "internal_error"
                assert "s3cr3t" not in answer.text
            assert svc.metrics.request_latency.labels(
                surface="http", endpoint="/v1/feeds/{feed}/changes")._sum.get() > counted


class _TrimmingLog:
    """A feed's change log that retention trims (to ``upto``) just before the next read, as a
    leader's retention pass can while a page request runs; counts reads of its trimmed position."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self.trimmed_reads = 0
        self.upto: int | None = None

    def trimmed_lsn(self) -> int:
        self.trimmed_reads += 1
        return int(self._log.trimmed_lsn())

    def read(self, *args: Any, **kwargs: Any) -> Any:
        if self.upto is not None:
            self._log.trim(self.upto, force=True)
            self.upto = None
        return self._log.read(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def test_a_trim_during_a_page_read_is_410_not_a_silent_gap(tmp_path: Path) -> None:
    """The retention check before the read decides the read-ahead key with the same trimmed
    position (one read); a trim under the cursor while the page is read is caught after it."""
    with run_offline(tmp_path / "data", {"shop": FeedOptions()}) as svc:
        log = svc.supervisor.changelog("shop")
        log.append([txn(n * 0x1000, 2, schema=n == 1, ts=n) for n in range(1, 9)])
        log.trim(0x3000, force=True)
        reader = svc.supervisor.reader("shop")
        trimming = _TrimmingLog(reader.changelog)
        reader.changelog = trimming  # type: ignore[assignment]
        with httpx.Client(base_url=svc.url, timeout=30) as client:
            for fmt, upto in (("json", 0x5000), ("arrow", 0x6000)):
                trimming.upto = upto  # the cursor passes the check, then its next changes go
                error = _error(client.get("/v1/feeds/shop/changes",
                                          params={"after": "0/3000", "format": fmt}), 410)
                assert error["code"] == "cursor_expired", fmt
            trimming.trimmed_reads = 0
            page = client.get("/v1/feeds/shop/changes", params={"after": "0/6000", "tables": "orders"})
            assert page.status_code == 200 and page.json()["changes"], page.text
            assert trimming.trimmed_reads == 2  # before the read (check + key) and after it


# -- schemathesis -----------------------------------------------------------------------------------

# Examples per operation: positive, negative, and positive on a feed that exists.
EXAMPLES = {"positive": 15, "negative": 10, "existing": 15}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OfflineService]:
    with run_offline(tmp_path_factory.mktemp("fuzz"), {"shop": FeedOptions(), "quiet": FeedOptions(toast="omit")},
                     read_tokens=[READ], admin_tokens=[ADMIN]) as svc:
        log = svc.supervisor.changelog("shop")
        log.append([txn(n * 0x1000, 1 + n % 5, schema=n == 1, ts=n) for n in range(1, 31)])
        log.trim(0x3000, force=True)  # so some generated cursors are older than retention
        yield svc


def test_schemathesis_finds_no_server_error_and_no_schema_violation(fuzzed: OfflineService) -> None:
    """Every operation of /openapi.json, positive and negative cases: no 5xx, every answer
    matches the document (status, content type, headers, body schema), invalid requests are
    refused. Operations on one feed also run against a feed that exists, so paging code runs
    with generated cursors, filters and limits, not only 404s."""
    schema = schemathesis.openapi.from_url(f"{fuzzed.url}/openapi.json")
    headers = {"Authorization": f"Bearer {ADMIN}"}
    ran: list[str] = []
    started = time.monotonic()
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result.err()
        operation = result.ok()
        label = f"{operation.method.upper()} {operation.path}"
        mutating = operation.method.upper() != "GET"
        runs: list[tuple[GenerationMode, dict[str, str] | None]] = [
            (GenerationMode.POSITIVE, None), (GenerationMode.NEGATIVE, None)]
        if "{feed}" in operation.path:  # on a feed that exists; changes only to the spare one
            runs.append((GenerationMode.POSITIVE, {"feed": "quiet" if mutating else "shop"}))
        for mode, path_parameters in runs:
            @given(case=operation.as_strategy(mode, path_parameters=path_parameters))
            @settings(max_examples=EXAMPLES["existing" if path_parameters else mode.value],
                      deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            def check(case: Any) -> None:
                query = case.query if isinstance(case.query, dict) else {}
                wait = query.get("wait")
                if isinstance(wait, (int, float)) and not isinstance(wait, bool) and 0 <= wait <= 60:
                    query["wait"] = 0  # long-polls on an idle feed would only slow the run
                if isinstance(case.body, dict) and isinstance(case.body.get("dsn"), str):
                    case.body["dsn"] = OFFLINE_DSN  # never connect where a generated DSN points
                response = case.call(base_url=fuzzed.url, headers=headers, timeout=30)
                assert response.status_code < 500, (f"{case.method} {case.formatted_path} "
                                                    f"{case.query} -> {response.status_code}: "
                                                    f"{response.text[:500]}")
                # Every check but "valid data is accepted": schema-valid requests may still be
                # refused by rules a schema cannot state (a range that ends before it starts,
                # a cursor past the head, an expired one, a source that refuses a feed).
                case.validate_response(response, headers=headers,
                                       excluded_checks=[positive_data_acceptance])

            try:
                check()
            except Unsatisfiable:
                # Nothing can be invalid about a request without parameters or body (/healthz).
                assert mode is GenerationMode.NEGATIVE and not operation.path.startswith("/v1/")
        ran.append(label)
    assert {"GET /v1/feeds/{feed}/changes", "GET /v1/feeds/{feed}/transactions", "POST /v1/feeds",
            "PUT /v1/feeds/{feed}/consumers/{name}", "GET /v1/feeds/{feed}/splits",
            "DELETE /v1/feeds/{feed}"} <= set(ran)
    assert time.monotonic() - started < 90


def test_limit_counts_kept_changes_and_one_request_scans_a_bounded_stretch(tmp_path: Path) -> None:
    """``limit`` counts the changes a page keeps (issue 30.2), and a request whose filters keep
    nothing still answers once it scanned ``SCAN_CHANGES``: an empty page, ``has_more``, and a
    ``next`` past what it scanned, from which the reader goes on without gap."""
    from pgfeed.feeds.serving import SCAN_CHANGES

    per_txn, count = 1000, SCAN_CHANGES // 1000 + 10
    with run_offline(tmp_path / "data", {"shop": FeedOptions()}) as svc:
        svc.supervisor.changelog("shop").append(
            [txn(n * 0x20000, per_txn, schema=n == 1, row_bytes=8) for n in range(1, count + 1)])
        end = f"0/{count * 0x20000:X}"
        with httpx.Client(base_url=svc.url, timeout=60) as client:
            kept = client.get("/v1/feeds/shop/changes", params={"limit": 2500, "tables": "public.orders"}).json()
            assert len(kept["changes"]) == 2500 and kept["next"] == "0/60000:499" and kept["has_more"]
            first = client.get("/v1/feeds/shop/changes",
                               params={"limit": 10, "tables": "public.nothing"}).json()
            assert first["changes"] == [] and first["has_more"] and first["next"] != end
            scanned = int(first["next"].split("/")[1].split(":")[0], 16) // 0x20000 * per_txn
            assert SCAN_CHANGES - per_txn <= scanned <= SCAN_CHANGES
            rest = client.get("/v1/feeds/shop/changes", params={
                "after": first["next"], "limit": 10, "tables": "public.nothing"}).json()
            assert rest == {"changes": [], "next": end, "head": end, "has_more": False}


def test_a_caught_up_reader_is_answered_from_the_shared_tail(tmp_path: Path) -> None:
    """A reader following the head gets each new commit from the shared tail (decoded and encoded
    once for every reader, on the event loop), not from a read of its own in a worker thread:
    the tail counts every answer, whether the commit came before the request or during it."""
    import threading

    with run_offline(tmp_path / "data", {"shop": FeedOptions()}) as svc:
        log, notifier = svc.supervisor.changelog("shop"), svc.supervisor.notifier("shop")

        def commit(lsn: int) -> None:
            log.append([txn(lsn, 1, schema=lsn == 0x1000)])
            notifier.publish(lsn)

        commit(0x1000)
        with httpx.Client(base_url=svc.url, timeout=30) as client:
            first = client.get("/v1/feeds/shop/changes", params={"after": "latest", "wait": "0.05"})
            cursor = first.json()["next"]
            tail = svc.supervisor.tail("shop")
            for n in range(2, 8):
                lsn = n * 0x1000
                if n % 2:
                    threading.Timer(0.05, commit, args=(lsn,)).start()  # while it waits
                else:
                    commit(lsn)  # before it asks
                served = tail.slices_served
                page = client.get("/v1/feeds/shop/changes", params={"after": cursor, "wait": "5"}).json()
                assert len(page["changes"]) == 1 and page["next"] == f"0/{lsn:X}"
                assert tail.slices_served == served + 1 or n == 2, n  # the first one starts the tail
                cursor = page["next"]
