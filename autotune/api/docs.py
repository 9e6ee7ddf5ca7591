"""`/docs` (Swagger UI) and `/redoc` served from assets installed with the package.

FastAPI's own pages load Swagger UI, ReDoc, a favicon and Google Fonts from CDNs, so on a
cluster without internet they are blank. The package `fastapi-offline` (MIT; it bundles
Swagger UI, Apache-2.0, and ReDoc, MIT) ships those files; they are mounted here and FastAPI's
page builders are pointed at them, so nothing is fetched from outside.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

ASSETS_URL = "/docs-assets"


def assets_dir() -> str:
    """The folder of the installed package that holds the Swagger UI and ReDoc files."""
    return str(files("fastapi_offline") / "static")


def install_docs(app: FastAPI, *, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Add the documentation pages to an app made with docs_url=None and redoc_url=None."""
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_redirect = app.swagger_ui_oauth2_redirect_url or f"{docs_url}/oauth2-redirect"
    app.mount(ASSETS_URL, StaticFiles(directory=assets_dir()), name="docs-assets")

    def asset(request: Request, name: str) -> str:
        # root_path: behind a proxy that serves the API under a prefix the links keep it.
        return f"{request.scope.get('root_path', '')}{ASSETS_URL}/{name}"

    @app.get(docs_url, include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=f"{request.scope.get('root_path', '')}{openapi_url}",
            title=f"{app.title} - Swagger UI", oauth2_redirect_url=oauth2_redirect,
            swagger_js_url=asset(request, "swagger-ui-bundle.js"),
            swagger_css_url=asset(request, "swagger-ui.css"),
            swagger_favicon_url=asset(request, "favicon.png"),
            swagger_ui_parameters=app.swagger_ui_parameters)

    @app.get(oauth2_redirect, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get(redoc_url, include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(
            openapi_url=f"{request.scope.get('root_path', '')}{openapi_url}",
            title=f"{app.title} - ReDoc", redoc_js_url=asset(request, "redoc.standalone.js"),
            redoc_favicon_url=asset(request, "favicon.png"), with_google_fonts=False)
