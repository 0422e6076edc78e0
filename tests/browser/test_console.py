"""The admin console in a real browser against a real server and PostgreSQL: a paused feed's lag
rises in the page while a workload runs and falls after resume, and pause/resume clicked in the
page change the feed's state in the API. Screenshots of each stage are kept."""

from __future__ import annotations

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
    wait_until(lambda: svc.supervisor.status(feed, probe_source=False).changes_captured >= 10, 15,
               "the first rows captured")
    page = browser_page.page
    page.goto(f"{base}/ui?interval=0.5")
    expect(page.locator("#banner")).to_contain_text("Enter an admin token", timeout=10_000)
    page.fill("#token", TOKEN)
    page.click("#use-token")
    card = page.locator(f"section[data-feed={feed}]")
    card.locator(".state", has_text="running").wait_for(timeout=15_000)
    assert card.locator("tr[data-consumer=billing]").count() == 1
    expect(card.locator(".slot .wal-status")).to_have_text("reserved")
    expect(card.locator(".slot")).to_have_attribute("data-risk", "ok")
    assert card.get_attribute("data-state") == "running"
    browser_page.screenshot("console-running")

    # Pause from the page: the API says paused.
    card.locator("button.pause").click()
    wait_until(lambda: _api_state(base) == "paused", 15, "the API to report paused")
    card.locator(".state", has_text="paused").wait_for(timeout=10_000)

    # A workload against the paused feed: the page's lag rises, and keeps rising.
    _write(dsn, 5000)
    first = wait_until(lambda: (_page_lag(page) or 0) > 1_000_000 and _page_lag(page), 20,
                       "the page to show lag over 1 MB")
    _write(dsn, 5000)
    second = wait_until(lambda: (_page_lag(page) or 0) > first + 1_000_000 and _page_lag(page), 20,
                        "the page's lag to rise further")
    assert float(card.locator(".lag-seconds").get_attribute("data-value") or 0) > 0
    browser_page.screenshot("console-paused-lagging")

    # Resume from the page: the API says running and the page's lag falls back under 64 KiB.
    card.locator("button.resume").click()
    wait_until(lambda: _api_state(base) == "running", 15, "the API to report running")
    wait_until(lambda: (lag := _page_lag(page)) is not None and lag < 64 * 1024, 30,
               "the page's lag to fall after resume")
    card.locator(".state", has_text="running").wait_for(timeout=10_000)
    # The catch-up burst shows in the throughput sparkline (a point above its baseline).
    points = card.locator(".sparkline polyline").get_attribute("points") or ""
    assert min(float(p.split(",")[1]) for p in points.split()) < 20, points
    consumer_behind = card.locator("tr[data-consumer=billing] td").last.get_attribute("data-value")
    assert consumer_behind is not None and int(consumer_behind) >= second // 2  # never acked
    browser_page.screenshot("console-resumed")
    assert browser_page.outside == [], browser_page.outside


def test_console_delete_needs_the_typed_name(console_feed, browser_page: BrowserPage) -> None:
    svc, feed, _ = console_feed
    page = browser_page.page
    page.goto(f"{svc.http_url}/ui?interval=0.5")
    page.evaluate("t => sessionStorage.setItem('pgfeed.adminToken', t)", TOKEN)
    page.reload()
    card = page.locator(f"section[data-feed={feed}]")
    card.locator(".state", has_text="running").wait_for(timeout=15_000)
    assert card.locator(".backfills-box").is_hidden()  # endpoint absent here: panel hidden or shown
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
    wait_until(lambda: httpx.get(f"{svc.http_url}/v1/feeds/{feed}", headers=AUTH).status_code == 404,
               15, "the feed to be deleted")
    card.wait_for(state="detached", timeout=10_000)
