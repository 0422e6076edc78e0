"""/docs and /redoc render the whole API in a real browser with everything outside loopback cut off
(the CDN FastAPI would use is unreachable), and the bearer token typed into "Authorize" is sent."""

from __future__ import annotations

import httpx
import pytest

import pgfeed
from tests.fixtures.fix_browser import BrowserPage
from tests.fixtures.fix_service import run_service

pytestmark = pytest.mark.browser

TOKEN = "docs-admin-token"


@pytest.fixture(scope="module")
def token_service(tmp_path_factory: pytest.TempPathFactory):
    with run_service(tmp_path_factory.mktemp("docs"), admin_tokens=[TOKEN]) as svc:
        yield svc


def _operations(base: str) -> list[tuple[str, str, str]]:
    doc = httpx.get(f"{base}/openapi.json").json()
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    return [(method.upper(), path, op.get("summary", "")) for path, item in doc["paths"].items()
            for method, op in item.items()]


def test_docs_render_every_operation_offline_and_send_the_token(
        token_service, browser_page: BrowserPage) -> None:
    base = token_service.http_url
    operations = _operations(base)
    assert len(operations) >= 15
    html = httpx.get(f"{base}/docs").text
    assert "https://" not in html  # no CDN in the page itself
    page = browser_page.page
    page.goto(f"{base}/docs")
    page.wait_for_selector(".opblock", timeout=20_000)
    assert page.title() == f"pgfeed {pgfeed.__version__} — API"
    assert pgfeed.__version__ in page.locator(".info .title").inner_text()
    shown = page.locator(".opblock").count()
    assert shown == len(operations), (shown, operations)
    rendered = page.locator(".opblock-summary-path").all_inner_texts()
    for method, path, _ in operations:
        assert path in {p.replace("\u200b", "") for p in rendered}, (method, path)
    assert page.locator("text=Unable to render this definition").count() == 0

    # Authorize with the bearer token, then try GET /v1/feeds from the page: 200, not 401.
    page.click("button.authorize")
    page.fill(".modal-ux input", TOKEN)
    page.click(".modal-ux button.authorize")
    page.click(".modal-ux button.close-modal")
    block = page.locator(".opblock-get", has=page.locator(".opblock-summary-path[data-path='/v1/feeds']"))
    block.locator(".opblock-summary").click()
    block.locator("button.try-out__btn").click()
    block.locator("button.execute").click()
    status = block.locator(".live-responses-table tbody .response-col_status").first
    status.wait_for(timeout=10_000)
    assert status.inner_text().strip() == "200"
    assert f"Bearer {TOKEN}" in block.locator(".curl-command").inner_text()
    browser_page.screenshot("docs-swagger")
    assert browser_page.outside == [], browser_page.outside


def test_redoc_renders_every_operation_offline(token_service, browser_page: BrowserPage) -> None:
    base = token_service.http_url
    operations = _operations(base)
    page = browser_page.page
    errors: list[str] = []  # a CSP refusal (ReDoc's CDN logo, once) is a console error
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(f"{base}/redoc")
    page.wait_for_selector("[data-section-id^='operation/']", state="attached", timeout=30_000)
    assert page.locator("[data-section-id^='operation/']").count() == len(operations)
    assert page.locator("img[alt='redocly logo']").count() == 1  # shown, from the page itself
    assert errors == [], errors
    browser_page.screenshot("docs-redoc")
    assert browser_page.outside == [], browser_page.outside


def test_the_browser_reaches_nothing_outside_loopback(browser_page: BrowserPage) -> None:
    """The fixture's guard itself: a CDN address is aborted (and recorded), as if offline."""
    from playwright.sync_api import Error as PlaywrightError

    url = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"
    with pytest.raises(PlaywrightError, match="ERR_INTERNET_DISCONNECTED"):
        browser_page.page.goto(url)
    assert browser_page.outside == [url]
