"""`/docs` and `/redoc` work without internet: a headless Chromium that reaches only 127.0.0.1
loads them from a real server and finds the operations listed; every resource the pages loaded
came from that server. The same browser, given FastAPI's stock (CDN) page, gets no Swagger UI:
so the network really is cut, and the test would fail against the CDN page."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from autotune.api.app import create_app
from autotune.api.routes import health
from autotune.settings import Settings
from tests.browser import OFFLINE_ARGS, WAIT_S, chromium, wait_for

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(app: FastAPI) -> Iterator[str]:
    """A real uvicorn server on a free local port, in a thread, stopped afterwards."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT_S)


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # The docs pages and the OpenAPI document touch no database.
    db = Path(tmp_path_factory.mktemp("docs")) / "a.db"
    yield from _serve(create_app(Settings(database_url=f"sqlite:///{db}")))


@pytest.fixture(scope="module")
def cdn_url() -> Iterator[str]:
    """FastAPI's stock docs page (Swagger UI from a CDN), what /docs served before."""
    app = FastAPI(title="stock")
    app.include_router(health.router)
    yield from _serve(app)


@pytest.fixture(scope="module")
def offline_browser() -> Iterator[Any]:
    driver = chromium(*OFFLINE_ARGS)
    try:
        yield driver
    finally:
        driver.quit()


_wait = wait_for


def _foreign_resources(driver: Any, base: str) -> list[str]:
    names: list[str] = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    return [n for n in names if not n.startswith(base + "/")]


REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
OPERATIONS = {"/v1/deployments/{name}/config", "/v1/campaigns/{campaign_id}/trials", "/healthz"}


def test_swagger_ui_lists_the_operations_offline(offline_browser: Any, api_url: str) -> None:
    offline_browser.get(f"{api_url}/docs")
    paths = _wait(offline_browser, lambda d: OPERATIONS <= set(found := d.execute_script(
        "return [...document.querySelectorAll('.opblock-summary-path')]"
        ".map(e => e.getAttribute('data-path'))")) and found, "Swagger UI's operations")
    assert "/v1/deployments/{name}/publish" in paths
    assert _foreign_resources(offline_browser, api_url) == []


def test_redoc_lists_the_operations_offline(offline_browser: Any, api_url: str) -> None:
    offline_browser.get(f"{api_url}/redoc")
    # ReDoc's menu lists every operation by its summary.
    def listed(driver: Any) -> str | bool:
        text: str = driver.find_element("tag name", "body").text
        return text if all(s in text for s in ("Current Config", "List Trials", "Healthz")) else False

    body = _wait(offline_browser, listed, "ReDoc's operations")
    assert "Rollback" in body
    # Only ReDoc's "powered by" logo is asked of its CDN; ReDoc drops the image when it fails.
    assert set(_foreign_resources(offline_browser, api_url)) <= {REDOC_LOGO}
    assert offline_browser.find_elements("css selector", f'img[src="{REDOC_LOGO}"]') == []


def test_the_stock_cdn_page_stays_blank_in_the_same_browser(offline_browser: Any,
                                                            cdn_url: str) -> None:
    offline_browser.get(f"{cdn_url}/docs")
    # The bundle is a blocking script: once the document has loaded, it ran or it failed.
    _wait(offline_browser, lambda d: d.execute_script("return document.readyState") == "complete",
          "the stock page to load")
    assert offline_browser.execute_script("return typeof window.SwaggerUIBundle") == "undefined"
    assert offline_browser.find_elements("css selector", ".opblock") == []
