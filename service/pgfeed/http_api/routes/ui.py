"""The admin console at ``/ui``: one static page (HTML, a little vanilla JavaScript, CSS) shipped
as package data. It talks to the public API only, with the admin token the operator types into
the page, so it needs no server-side session and shows whatever the API serves (backfills
included, once the API has them)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse, RedirectResponse, Response

__all__ = ["install_ui"]

_STATIC = Path(__file__).resolve().parent.parent / "static" / "ui"

# The page loads nothing but its own files and talks to nothing but this server.
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def install_ui(app: FastAPI, url: str = "/ui") -> None:
    """Serve the console page at ``url`` and its assets under ``url/assets``."""
    app.mount(f"{url}/assets", StaticFiles(directory=_STATIC), name="ui-assets")

    @app.get("/", include_in_schema=False)
    async def root() -> Response:  # a person who opens the server's address finds the console
        return RedirectResponse(url.lstrip("/"), status_code=307)  # relative: behind a prefix too

    @app.get(url, include_in_schema=False)
    async def console() -> Response:
        return FileResponse(_STATIC / "index.html", media_type="text/html",
                            headers={"Content-Security-Policy": _CSP, "Cache-Control": "no-cache",
                                     "X-Content-Type-Options": "nosniff"})
