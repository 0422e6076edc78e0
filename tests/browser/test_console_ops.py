"""Issue 30.1, the console an operator expects, in headless Chromium against a real server and a
real PostgreSQL: history charts drawn from the server's ring (so they are there after a reload),
per-table counts equal to the changes made, backfill rows apart from live throughput, action
results that stay until dismissed, a rejected token said as such, the create form's source checks,
and backfill cancel and clear. Screenshots of each stage are kept."""

from __future__ import annotations

import time
from typing import Any

import httpx
import psycopg
import pytest
from playwright.sync_api import expect

from tests.fixtures.fix_browser import BrowserPage
from tests.fixtures.fix_pg import Clusters, create_database, drop_slots
from tests.fixtures.fix_service import run_service, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.pg]

TOKEN = "console-ops-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def ops_feed(tmp_path_factory: pytest.TempPathFactory, pg_clusters: Clusters):
    """(service, feed, dsn): a token-protected service sampling history every 0.3 s, one feed
    over `orders` and `items` (keyed); `logs` has no key."""
    cluster = pg_clusters.newest()
    dsn = create_database(cluster, prefix="uiops")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, note text)")
        conn.execute("CREATE TABLE items (id bigserial PRIMARY KEY)")
        conn.execute("CREATE TABLE logs (msg text)")
    with run_service(tmp_path_factory.mktemp("console-ops"), admin_tokens=[TOKEN],
                     history_seconds=0.3) as svc:
        answer = httpx.post(f"{svc.http_url}/v1/feeds", headers=AUTH, json={
            "name": "shop", "dsn": dsn, "tables": ["public.orders", "public.items"],
            "options": {"heartbeat_seconds": 0.5}})
        assert answer.status_code == 201, answer.text
        httpx.put(f"{svc.http_url}/v1/feeds/shop/consumers/billing", headers=AUTH,
                  json={"cursor": answer.json()["head_lsn"]}).raise_for_status()
        try:
            yield svc, "shop", dsn
        finally:
            for feed in httpx.get(f"{svc.http_url}/v1/feeds", headers=AUTH).json()["feeds"]:
                httpx.delete(f"{svc.http_url}/v1/feeds/{feed['name']}", headers=AUTH)
    drop_slots(cluster, dsn)


def _open(page: Any, base: str, token: str = TOKEN) -> None:
    page.goto(f"{base}/ui?interval=0.5")
    page.evaluate("t => sessionStorage.setItem('pgfeed.adminToken', t)", token)
    page.reload()


def _get(base: str, path: str) -> Any:
    answer = httpx.get(f"{base}{path}", headers=AUTH)
    answer.raise_for_status()
    return answer.json()


def _points(page: Any, chart: str) -> int:
    value = page.locator(f"section[data-feed=shop] .chart[data-chart={chart}] svg").get_attribute(
        "data-points")
    return int(value or 0)


def test_history_charts_survive_a_reload_and_table_counts_equal_the_changes(
        ops_feed, browser_page: BrowserPage) -> None:
    svc, feed, dsn = ops_feed
    base = svc.http_url
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO orders (note) SELECT 'n' FROM generate_series(1, 30)")
        conn.execute("UPDATE orders SET note = 'u' WHERE id <= 5")
        conn.execute("DELETE FROM orders WHERE id > 28")
        conn.execute("INSERT INTO items SELECT FROM generate_series(1, 7)")
    expected = {"public.orders": (37, 30, 5, 2), "public.items": (7, 7, 0, 0)}

    def counts() -> dict[str, tuple[int, int, int, int]]:
        return {t["table"]: (t["changes"], t["inserts"], t["updates"], t["deletes"])
                for t in _get(base, f"/v1/feeds/{feed}/table-counts")["tables"]}

    wait_until(lambda: counts() == expected, 60, f"table counts {expected} (have {counts()})")
    # Status scope, documented: an unknown feed is a 404 on both.
    for path in ("history", "table-counts"):
        assert httpx.get(f"{base}/v1/feeds/nope/{path}", headers=AUTH).status_code == 404
        assert httpx.get(f"{base}/v1/feeds/{feed}/{path}").status_code == 401

    # Backfill rows are counted apart: not in the live counters, in backfill_rows.
    live_before = _get(base, f"/v1/feeds/{feed}")["changes_captured"]
    started = httpx.post(f"{base}/v1/feeds/{feed}/backfills", headers=AUTH,
                         json={"tables": ["public.orders"]})
    assert started.status_code == 202, started.text
    wait_until(lambda: _get(base, f"/v1/feeds/{feed}")["backfill_rows_captured"] == 28, 60,
               "the backfill's 28 rows")
    status = _get(base, f"/v1/feeds/{feed}")
    assert status["changes_captured"] == live_before, status
    wait_until(lambda: {t["table"]: t["backfill_rows"] for t in
                        _get(base, f"/v1/feeds/{feed}/table-counts")["tables"]}
               == {"public.orders": 28, "public.items": 0}, 60, "backfill rows per table")
    assert counts() == expected  # live counts unchanged by the backfill

    # Lag while a consumer is behind: the history has samples with the consumer's distance.
    wait_until(lambda: len(_get(base, f"/v1/feeds/{feed}/history")["samples"]) >= 5, 60,
               "five history samples")
    history = _get(base, f"/v1/feeds/{feed}/history")
    assert history["interval_seconds"] == 0.3 and history["keep_hours"] == 6
    last = history["samples"][-1]
    assert last["consumers"]["billing"] > 0 and last["retained_bytes"] is not None

    def a_sample_with_a_rate() -> bool:  # live commits while we look: the rate spans ~10 s only
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO items SELECT FROM generate_series(1, 1)")
        return any(s["changes_per_second"] > 0
                   for s in _get(base, f"/v1/feeds/{feed}/history")["samples"])

    wait_until(a_sample_with_a_rate, 60, "a history sample with a capture rate")
    newer = _get(base, f"/v1/feeds/{feed}/history?since={last['at']}")["samples"]
    assert all(s["at"] > last["at"] for s in newer)

    page = browser_page.page
    _open(page, base)
    card = page.locator(f"section[data-feed={feed}]")
    card.locator(".state", has_text="running").wait_for(timeout=30_000)
    wait_until(lambda: _points(page, "rates") >= 5, 30, "the rates chart drawn")
    expect(card.locator("tr[data-table='public.orders'] td.changes")).to_have_text("37", timeout=30_000)
    expect(card.locator("tr[data-table='public.items'] td.changes")).not_to_have_text("0")
    expect(card.locator("tr[data-table='public.orders'] td.backfill-rows")).to_have_text("28")
    before_reload = _points(page, "lag_seconds")
    browser_page.screenshot("console-history-and-tables")

    # A reload: the charts come back from the server at once, with at least what was drawn.
    page.reload()
    reloaded = time.monotonic()
    wait_until(lambda: _points(page, "lag_seconds") >= before_reload, 30, "charts after reload")
    print(f"charts redrawn {time.monotonic() - reloaded:.2f} s after the reload, "
          f"{_points(page, 'lag_seconds')} points")
    for chart in ("lag_bytes", "rates", "wal", "consumers"):
        assert _points(page, chart) > 0, chart
    assert card.locator(".chart[data-chart=consumers] polyline[data-series=billing]").count() >= 1
    assert card.locator(".chart[data-chart=rates] polyline[data-series=captured]").count() >= 1
    browser_page.screenshot("console-history-after-reload")
    assert browser_page.outside == [], browser_page.outside


def test_action_failures_stay_until_dismissed_and_a_wrong_token_is_rejected(
        ops_feed, browser_page: BrowserPage) -> None:
    svc, feed, _ = ops_feed
    page = browser_page.page
    page.goto(f"{svc.http_url}/ui?interval=0.3")
    expect(page.locator("#banner")).to_contain_text("Enter an admin token", timeout=30_000)
    page.fill("#token", "not-the-token")
    page.click("#use-token")
    expect(page.locator("#banner")).to_contain_text("Token rejected", timeout=30_000)
    browser_page.screenshot("console-token-rejected")
    page.fill("#token", TOKEN)
    page.click("#use-token")
    card = page.locator(f"section[data-feed={feed}]")
    card.locator(".state", has_text="running").wait_for(timeout=30_000)
    expect(page.locator("#banner")).to_be_hidden()

    # A failed action (a backfill of a table the feed does not have: 404) stays, refreshes or not.
    card.locator(".backfill-tables").fill("public.nope")
    card.locator(".start-backfill button").click()
    failure = page.locator("#results .result.error")
    expect(failure).to_contain_text("failed: 404", timeout=30_000)
    expect(failure).to_contain_text("public.nope")
    first_update = page.locator("#updated").inner_text()
    wait_until(lambda: page.locator("#updated").inner_text() != first_update, 30, "a refresh")
    time.sleep(2)  # several more refreshes (every 0.3 s)
    expect(failure).to_be_visible()
    expect(failure).to_have_count(1)
    # A success stays too, beside it.
    card.locator("button.pause").click()
    expect(page.locator("#results .result.info")).to_contain_text("pause: done", timeout=30_000)
    time.sleep(1)
    expect(failure).to_be_visible()
    browser_page.screenshot("console-action-results")
    failure.locator("button.dismiss").click()
    expect(failure).to_have_count(0)
    expect(page.locator("#results .result.info")).to_have_count(1)
    card.locator("button.resume").click()

    # A slot the source does not report is "unknown", never "safe WAL unlimited".
    status = _get(svc.http_url, f"/v1/feeds/{feed}")
    status["slot_risk"] = {"wal_status": None, "safe_wal_size": None, "retained_bytes": None}
    # (the rendering of what the API would answer during an outage, answered by the test)
    status.update(state="reconnecting", last_error="connection to the source refused",
                  next_attempt_at="2030-01-01T00:00:00+00:00")
    page.route(f"**/v1/feeds/{feed}", lambda route: route.fulfill(status=200, json=status))
    expect(card.locator(".safe-wal")).to_have_text("unknown", timeout=30_000)
    expect(card.locator(".wal-status")).to_have_text("unknown")
    expect(card.locator(".state")).to_have_text("reconnecting")
    expect(card.locator(".reconnect-box")).to_contain_text("connection to the source refused")
    expect(card.locator(".next-attempt")).not_to_have_text("—")
    browser_page.screenshot("console-reconnecting-unknown-slot")


def test_create_form_checks_the_source_first(ops_feed, browser_page: BrowserPage) -> None:
    svc, _, dsn = ops_feed
    page = browser_page.page
    _open(page, svc.http_url)
    page.locator("section[data-feed=shop] .state", has_text="running").wait_for(timeout=30_000)
    page.locator("#create-feed summary").click()
    page.fill("#create-name", "journal")
    page.fill("#create-dsn", dsn)
    page.fill("#create-tables", "public.logs")
    page.click("#create-check")
    finding = page.locator("#create-findings tr[data-check=replica_identity][data-level=error]")
    expect(finding).to_contain_text("public.logs", timeout=30_000)
    expect(finding.locator("td.fix")).to_contain_text("REPLICA IDENTITY FULL")
    expect(page.locator("#create-verdict")).to_have_attribute("data-ok", "false")
    expect(page.locator("#create-go")).to_be_disabled()
    browser_page.screenshot("console-create-keyless-finding")
    assert httpx.get(f"{svc.http_url}/v1/feeds/journal", headers=AUTH).status_code == 404

    page.fill("#create-tables", "public.orders")
    expect(page.locator("#create-go")).to_be_disabled()  # changed since the check
    page.click("#create-check")
    expect(page.locator("#create-verdict")).to_have_attribute("data-ok", "true", timeout=30_000)
    assert httpx.get(f"{svc.http_url}/v1/feeds/journal", headers=AUTH).status_code == 404
    browser_page.screenshot("console-create-checked")
    page.click("#create-go")
    expect(page.locator("#results .result.info")).to_contain_text("feed journal created",
                                                                  timeout=60_000)
    page.locator("section[data-feed=journal] .state", has_text="running").wait_for(timeout=30_000)
    assert _get(svc.http_url, "/v1/feeds/journal")["tables"] == ["public.orders"]
    browser_page.screenshot("console-create-done")


def test_backfill_cancel_and_clear(ops_feed, browser_page: BrowserPage) -> None:
    svc, feed, dsn = ops_feed
    base = svc.http_url
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO items SELECT FROM generate_series(1, 200000)")
    started = httpx.post(f"{base}/v1/feeds/{feed}/backfills", headers=AUTH,
                         json={"tables": ["public.items"], "chunk_rows": 20, "parallel": 1})
    assert started.status_code == 202, started.text
    backfill = started.json()["id"]
    page = browser_page.page
    _open(page, base)
    card = page.locator(f"section[data-feed={feed}]")
    row = card.locator(f"div[data-backfill='{backfill}']")
    wait_until(lambda: _get(base, f"/v1/feeds/{feed}/backfills/{backfill}")["rows"] > 0, 30,
               "the backfill under way")
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button.cancel-backfill").click(timeout=30_000)
    wait_until(lambda: _get(base, f"/v1/feeds/{feed}/backfills/{backfill}")["state"] == "cancelled",
               30, "the backfill cancelled")
    expect(page.locator("#results .result.info")).to_contain_text(f"backfills/{backfill}: done",
                                                                  timeout=30_000)
    expect(row).to_have_class("backfill state-cancelled", timeout=30_000)
    expect(row.locator("button.cancel-backfill")).to_have_count(0)
    rows = _get(base, f"/v1/feeds/{feed}/backfills/{backfill}")["rows"]
    assert 0 < rows < 200_000, rows
    browser_page.screenshot("console-backfill-cancelled")
    card.locator("button.clear-backfills").click()
    expect(row).to_have_count(0)
    expect(card.locator("button.show-backfills")).to_have_text("Show cleared (1)")
    page.reload()  # cleared stays cleared in this browser; the server keeps the record
    card.locator(".state", has_text="running").wait_for(timeout=30_000)
    expect(card.locator("button.show-backfills")).to_be_visible()
    expect(row).to_have_count(0)
    assert _get(base, f"/v1/feeds/{feed}/backfills/{backfill}")["state"] == "cancelled"
    browser_page.screenshot("console-backfill-cleared")
