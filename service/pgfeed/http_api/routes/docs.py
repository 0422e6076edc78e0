"""API documentation pages served from assets shipped in a Python package, never from a CDN.

FastAPI's own `/docs` and `/redoc` load Swagger UI and ReDoc from a CDN, so they are blank on a
private network. ``fastapi-offline`` ships Swagger UI 5.x and ReDoc (both render OpenAPI 3.1;
``swagger-ui-bundle`` ships 4.15, which cannot); we serve its files and build the pages here so
the title, version and bearer-token "Authorize" button are ours.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

__all__ = ["ASSETS_URL", "install_docs"]

ASSETS_URL = "/docs-assets"
_ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"

# The token typed into "Authorize" survives a reload (kept in the browser's localStorage by
# Swagger UI); requests show their duration; the operations list is filterable.
# No validator badge (it would ask an outside host).
_SWAGGER_PARAMETERS = {"persistAuthorization": True, "displayRequestDuration": True,
                       "filter": True, "tryItOutEnabled": False, "validatorUrl": None}
# The pages may load nothing from elsewhere: ReDoc's sidebar logo, for one, points at a CDN.
_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'")


# ReDoc's menu footer always shows Redocly's logo from its CDN (no option hides it), which the
# policy above blocks (a console error on every load): our copy of the bundle points it at an
# inline image instead.
_REDOC_CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
_REDOC_LOCAL_LOGO = (b"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='16' "
                     b"height='16'%3E%3C/svg%3E")
_REDOC_JS = "redoc.standalone.js"


def _offline(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = _CSP
    return page


def install_docs(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Serve Swagger UI at ``docs_url`` and ReDoc at ``redoc_url`` from packaged assets (build the
    app with ``docs_url=None, redoc_url=None`` so FastAPI's CDN pages are not registered)."""
    redoc_js = (_ASSETS_DIR / _REDOC_JS).read_bytes().replace(_REDOC_CDN_LOGO, _REDOC_LOCAL_LOGO)

    @app.get(f"{ASSETS_URL}/{_REDOC_JS}", include_in_schema=False)
    async def redoc_bundle() -> Response:  # before the mount: it answers this one file
        return Response(redoc_js, media_type="text/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})

    app.mount(ASSETS_URL, StaticFiles(directory=_ASSETS_DIR), name="docs-assets")
    oauth2_redirect = f"{docs_url}/oauth2-redirect"
    page_title = f"{app.title} {app.version} — API"

    @app.get(docs_url, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _offline(get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}", title=page_title,
            oauth2_redirect_url=f"{root}{oauth2_redirect}",
            swagger_js_url=f"{root}{ASSETS_URL}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_URL}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
            swagger_ui_parameters=_SWAGGER_PARAMETERS))

    @app.get(oauth2_redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(redoc_url, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return _offline(get_redoc_html(openapi_url=f"{root}{app.openapi_url}", title=page_title,
                              redoc_js_url=f"{root}{ASSETS_URL}/redoc.standalone.js",
                              redoc_favicon_url=f"{root}{ASSETS_URL}/favicon.png",
                              with_google_fonts=False))
