"""The admin console in a real browser against a real server and PostgreSQL: a paused feed's lag
rises in the page while a workload runs and falls after resume, and pause/resume clicked in the
page change the feed's state in the API. Screenshots of each stage are kept."""

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

TOKEN = "console-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def console_feed(tmp_path_factory: pytest.TempPathFactory, pg_clusters: Clusters):
    """(service, feed, dsn): a token-protected service with one feed over table `orders`."""
    cluster = pg_clusters.newest()
    dsn = create_database(cluster, prefix="ui")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, note text)")
        conn.execute("CREATE TABLE items (id bigserial PRIMARY KEY)")
    with run_service(tmp_path_factory.mktemp("console"), admin_tokens=[TOKEN]) as svc:
        answer = httpx.post(f"{svc.http_url}/v1/feeds", headers=AUTH, json={
            "name": "shop", "dsn": dsn, "tables": ["public.orders"],
            "options": {"heartbeat_seconds": 0.5}})
        assert answer.status_code == 201, answer.text
        httpx.put(f"{svc.http_url}/v1/feeds/shop/consumers/billing", headers=AUTH,
                  json={"cursor": answer.json()["head_lsn"]}).raise_for_status()
        try:
            yield svc, "shop", dsn
        finally:
            httpx.delete(f"{svc.http_url}/v1/feeds/shop", headers=AUTH)
    drop_slots(cluster, dsn)


def _api_state(base: str) -> str:
    return httpx.get(f"{base}/v1/feeds/shop", headers=AUTH).json()["state"]


def _page_lag(page: Any) -> int | None:
    value = page.locator("section[data-feed=shop] .lag-bytes").get_attribute("data-value")
    return None if value is None else int(value)


def _write(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO orders (note) SELECT repeat('x', 200) FROM generate_series(1, %s)",
                     (rows,))


def test_console_shows_lag_rising_while_paused_and_falling_after_resume(
        console_feed, browser_page: BrowserPage) -> None:
    svc, feed, dsn = console_feed
    base = svc.http_url
    _write(dsn, 10)  # something captured: lag in seconds counts from its commit
    wait_until(lambda: svc.supervisor.status(feed, probe_source=False).changes_captured >= 10, 60,
               "the first rows captured")
    page = browser_page.page
    page.goto(f"{base}/ui?interval=0.5")
    expect(page.locator("#banner")).to_contain_text("Enter an admin token", timeout=30_000)
    page.fill("#token", TOKEN)
    page.click("#use-token")
    card = page.locator(f"section[data-feed={feed}]")
    card.locator(".state", has_text="running").wait_for(timeout=30_000)
    assert card.locator("tr[data-consumer=billing]").count() == 1
    expect(card.locator(".slot .wal-status")).to_have_text("reserved")
    expect(card.locator(".slot")).to_have_attribute("data-risk", "ok")
    assert card.get_attribute("data-state") == "running"
    browser_page.screenshot("console-running")

    # Pause from the page: the API says paused.
    card.locator("button.pause").click()
    wait_until(lambda: _api_state(base) == "paused", 60, "the API to report paused")
    card.locator(".state", has_text="paused").wait_for(timeout=30_000)

    # A workload against the paused feed: the page's lag rises, and keeps rising.
    _write(dsn, 5000)
    first = wait_until(lambda: (_page_lag(page) or 0) > 1_000_000 and _page_lag(page), 60,
                       "the page to show lag over 1 MB")
    _write(dsn, 5000)
    second = wait_until(lambda: (_page_lag(page) or 0) > first + 1_000_000 and _page_lag(page), 60,
                        "the page's lag to rise further")
    assert float(card.locator(".lag-seconds").get_attribute("data-value") or 0) > 0
    browser_page.screenshot("console-paused-lagging")

    # Resume from the page: the API says running and the page's lag falls back under 64 KiB.
    card.locator("button.resume").click()
    clicked = time.monotonic()
    wait_until(lambda: _api_state(base) == "running", 60, "the API to report running")
    print(f"resume clicked -> API running in {time.monotonic() - clicked:.1f} s")
    wait_until(lambda: (lag := _page_lag(page)) is not None and lag < 64 * 1024, 60,
               "the page's lag to fall after resume")
    card.locator(".state", has_text="running").wait_for(timeout=30_000)
    # The catch-up burst shows in the throughput sparkline (a point above its baseline).
    points = card.locator(".sparkline polyline").get_attribute("points") or ""
    assert min(float(p.split(",")[1]) for p in points.split()) < 20, points
    consumer_behind = card.locator("tr[data-consumer=billing] td").last.get_attribute("data-value")
    assert consumer_behind is not None and int(consumer_behind) >= second // 2  # never acked
    browser_page.screenshot("console-resumed")
    assert browser_page.outside == [], browser_page.outside


def test_console_slot_risk_set_tables_and_delete_with_typed_name(console_feed, browser_page: BrowserPage) -> None:
    svc, feed, _ = console_feed
    page = browser_page.page
    page.goto(f"{svc.http_url}/ui?interval=0.5")
    page.evaluate("t => sessionStorage.setItem('pgfeed.adminToken', t)", TOKEN)
    page.reload()
    card = page.locator(f"section[data-feed={feed}]")
    card.locator(".state", has_text="running").wait_for(timeout=30_000)
    # Slot risk: what the page highlights, and how.
    risks = page.evaluate("""() => [
        slotRisk({wal_status: "reserved", safe_wal_size: null, retained_bytes: 1}),
        slotRisk({wal_status: "extended", safe_wal_size: null, retained_bytes: 1}),
        slotRisk({wal_status: "reserved", safe_wal_size: 10, retained_bytes: 100}),
        slotRisk({wal_status: "unreserved", safe_wal_size: 0, retained_bytes: 1}),
        slotRisk({wal_status: "lost", safe_wal_size: null, retained_bytes: null})]""")
    assert risks == ["ok", "warning", "warning", "critical", "critical"]
    # The backfills panel follows the API: shown when the endpoint answers, hidden on 404.
    has_backfills = httpx.get(f"{svc.http_url}/v1/feeds/{feed}/backfills",
                              headers=AUTH).status_code != 404
    expect(card.locator(".backfills-box")).to_be_visible(visible=has_backfills)

    # Set tables from the page: the API's feed captures the new list.
    card.locator(".tables-box summary").click()
    card.locator(".tables-input").fill("public.orders, public.items")
    card.locator(".set-tables button").click()
    wait_until(lambda: httpx.get(f"{svc.http_url}/v1/feeds/{feed}", headers=AUTH).json()["tables"]
               == ["public.orders", "public.items"], 60, "the new table list")
    expect(card.locator(".tables-summary")).to_have_text("public.orders, public.items")

    card.locator("button.delete").click()
    ok = page.locator("#confirm-ok")
    page.fill("#confirm-name", "sho")
    assert ok.is_disabled()
    page.locator("#confirm-delete button[value=cancel]").click()
    assert httpx.get(f"{svc.http_url}/v1/feeds/{feed}", headers=AUTH).status_code == 200
    card.locator("button.delete").click()
    page.fill("#confirm-name", feed)
    browser_page.screenshot("console-delete-confirm")
    ok.click()
    try:
        wait_until(lambda: httpx.get(f"{svc.http_url}/v1/feeds/{feed}",
                                     headers=AUTH).status_code == 404, 60, "the feed to be deleted")
    finally:
        browser_page.screenshot("console-delete-done")
        print("dialog:", page.locator("#confirm-delete .dialog-error").inner_text(),
              "banner:", page.locator("#banner").inner_text())
    card.wait_for(state="detached", timeout=30_000)


BACKFILLS = {"backfills": [  # the shape of GET /v1/feeds/{feed}/backfills (BackfillOut)
    {"id": "bf1", "state": "running", "rows": 2500, "chunks": 3, "estimate_left": 7500,
     "rows_per_second": 1250.0, "eta_seconds": 6.0, "chunk_rows": 1000, "parallel": 2,
     "initial": False, "redone_chunks": 0, "last_error": None, "created_at": 0, "finished_at": None,
     "tables": [{"table": "public.orders", "parts": 1, "rows": 2000, "chunks": 2,
                 "estimate_left": 2000, "done": False},
                {"table": "public.items", "parts": 1, "rows": 500, "chunks": 1,
                 "estimate_left": 0, "done": True}]},
    {"id": "bf0", "state": "failed", "rows": 0, "chunks": 0, "estimate_left": 10,
     "rows_per_second": 0.0, "eta_seconds": None, "chunk_rows": 1000, "parallel": 1,
     "initial": False, "redone_chunks": 0, "last_error": "table public.gone does not exist",
     "created_at": 0, "finished_at": 1, "tables": [
         {"table": "public.gone", "parts": 1, "rows": 0, "chunks": 0, "estimate_left": 0,
          "done": False, "state": "failed", "error": "it does not exist"}]}]}


def test_console_shows_backfill_progress_and_starts_one(console_feed,
                                                        browser_page: BrowserPage) -> None:
    """Only the backfills endpoint is answered by the test (this branch's server has none yet);
    the rest is the real server. The page must render the progress and POST a start."""
    svc, feed, _ = console_feed
    page = browser_page.page
    posted: list[Any] = []

    def backfills(route: Any) -> None:
        if route.request.method == "POST":
            posted.append(route.request.post_data_json)
            route.fulfill(status=202, json={**BACKFILLS["backfills"][0], "id": "bf2"})
        else:
            route.fulfill(status=200, json=BACKFILLS)

    page.route(f"**/v1/feeds/{feed}/backfills", backfills)
    page.goto(f"{svc.http_url}/ui?interval=0.5")
    page.evaluate("t => sessionStorage.setItem('pgfeed.adminToken', t)", TOKEN)
    page.reload()
    card = page.locator(f"section[data-feed={feed}]")
    expect(card.locator(".backfills-box")).to_be_visible(timeout=30_000)
    orders = card.locator("div[data-backfill=bf1] progress[data-table='public.orders']")
    expect(orders).to_have_attribute("max", "4000")
    expect(orders).to_have_attribute("value", "2000")
    items = card.locator("div[data-backfill=bf1] progress[data-table='public.items']")
    expect(items).to_have_attribute("value", "500")
    expect(card.locator("div[data-backfill=bf1]")).to_contain_text("1250 rows/s")
    expect(card.locator("div[data-backfill=bf0] pre")).to_have_text("table public.gone does not exist")
    expect(card.locator("div[data-backfill=bf0]")).to_contain_text(  # a table's own end
        "public.gone: 0 of ~0 rows, 0 chunks (failed: it does not exist)")
    card.locator(".backfill-tables").fill("public.orders")
    # Route handlers run only while Playwright is called (sync API): wait through Playwright.
    with page.expect_request(lambda r: r.method == "POST" and r.url.endswith("/backfills"),
                             timeout=30_000):
        card.locator(".start-backfill button").click()
    expect(page.locator("#results .result.info")).to_contain_text("backfills: done", timeout=30_000)
    assert posted == [{"tables": ["public.orders"]}]
    browser_page.screenshot("console-backfills")


def test_console_shows_a_lost_slot_and_resyncs_it(console_feed, browser_page: BrowserPage) -> None:
    """Issue 26: a slot dropped under the feed shows as failed with the reason, the resume button
    gives way to Resync, and a resync clicked in the page brings the feed back, its gap listed."""
    from pgfeed.replication import slots

    svc, feed, dsn = console_feed
    page = browser_page.page
    page.goto(f"{svc.http_url}/ui?interval=0.5")
    page.evaluate("t => sessionStorage.setItem('pgfeed.adminToken', t)", TOKEN)
    page.reload()
    card = page.locator(f"section[data-feed={feed}]")
    card.locator(".state", has_text="running").wait_for(timeout=30_000)
    expect(card.locator("button.resync")).to_be_hidden()
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert slots.drop_slot(conn, "pgfeed_shop", wait=10)
    card.locator(".state", has_text="failed").wait_for(timeout=30_000)
    expect(card).to_have_attribute("data-slot-lost", "true")
    expect(card.locator(".lost-box")).to_be_visible()
    expect(card.locator(".lost-reason")).to_contain_text("pgfeed_shop dropped")
    expect(card.locator(".last-error")).to_contain_text("changes were lost")
    expect(card.locator("button.resume")).to_be_hidden()
    browser_page.screenshot("console-slot-lost")

    page.once("dialog", lambda dialog: dialog.accept())
    card.locator("button.resync").click()
    expect(page.locator("#results .result.info")).to_contain_text("truncate", timeout=30_000)
    card.locator(".state", has_text="running").wait_for(timeout=30_000)
    expect(card.locator(".lost-box")).to_be_hidden()
    expect(card.locator(".gaps")).to_contain_text("gap: changes after")
    assert _api_state(svc.http_url) == "running"
    browser_page.screenshot("console-resynced")
    assert browser_page.outside == [], browser_page.outside
