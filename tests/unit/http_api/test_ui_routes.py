"""The console and docs routes over HTTP (no browser): what is served, with which headers, and
that the page's own paths are relative so that it works under a proxy's path prefix."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from tests.fixtures.fix_http import run_offline


def test_console_and_docs_are_served_from_the_package(tmp_path: Path) -> None:
    with run_offline(tmp_path, {}) as svc:
        page = httpx.get(f"{svc.url}/ui")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assets = re.findall(r'(?:href|src)="([^"]+)"', page.text)
        assert "ui/assets/console.js" in assets and "ui/assets/console.css" in assets
        assert not [a for a in assets if a.startswith(("/", "http"))]  # relative only
        for asset in ("console.js", "console.css"):
            assert httpx.get(f"{svc.url}/ui/assets/{asset}").status_code == 200
        root = httpx.get(f"{svc.url}/", follow_redirects=False)
        assert root.status_code == 307 and root.headers["location"] == "ui"  # relative
        assert httpx.get(f"{svc.url}/", follow_redirects=True).url.path == "/ui"
        slash = httpx.get(f"{svc.url}/ui/", follow_redirects=False)
        assert slash.status_code in (307, 308) and slash.headers["location"].endswith("/ui")
        for path in ("/docs", "/redoc"):
            answer = httpx.get(f"{svc.url}{path}")
            assert answer.status_code == 200 and "https://" not in answer.text
            assert "/docs-assets/" in answer.text
        assert httpx.get(f"{svc.url}/docs-assets/swagger-ui-bundle.js").status_code == 200
        redoc = httpx.get(f"{svc.url}/docs-assets/redoc.standalone.js")  # no CDN logo in our copy
        assert redoc.status_code == 200 and b"cdn.redoc.ly" not in redoc.content
        assert b"redocly logo" in redoc.content
        paths = httpx.get(f"{svc.url}/openapi.json").json()["paths"]
        assert not [p for p in paths if p.startswith(("/ui", "/docs", "/redoc"))]
