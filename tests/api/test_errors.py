"""Every error the API answers has one JSON shape: {"error": {"type", "message"}}."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from autotune.api.app import create_app
from autotune.errors import ConfigError, TraceError
from autotune.settings import Settings
from tests.api.seed import Seeded, seed_database

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed_database(f"sqlite:///{tmp_path_factory.mktemp('errors') / 'a.db'}")


def _app(url: str, **api: Any) -> FastAPI:
    app = create_app(Settings(database_url=url, api=api))  # type: ignore[arg-type]

    @app.get("/test/boom")
    def boom() -> None:
        raise RuntimeError("secret internals: password=hunter2")

    @app.get("/test/trace-error")
    def trace_error() -> None:
        raise TraceError("the trace has no rows; capture some traffic first")

    @app.get("/test/config-error")
    def config_error() -> None:
        raise ConfigError("bad flag; use another")

    return app


@pytest.fixture
def client(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(_app(seeded.url, token="s3cret"), raise_server_exceptions=False) as c:
        yield c


def _error(r: Any, status: int, kind: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind, body
    message: str = body["error"]["message"]
    assert message and "\n" not in message
    return message


def test_unknown_route_is_404(client: TestClient) -> None:
    message = _error(client.get("/v2/anything"), 404, "NotFound")
    assert "/v2/anything" in message and "/docs" in message


def test_wrong_method_is_405_with_allow(client: TestClient) -> None:
    r = client.delete("/v1/deployments/demo/config")
    message = _error(r, 405, "MethodNotAllowed")
    assert r.headers["allow"] == "GET" and "DELETE" in message
    _error(client.get("/v1/deployments/demo/publish"), 405, "MethodNotAllowed")


def test_validation_errors_name_the_field(client: TestClient) -> None:
    message = _error(client.get("/v1/deployments/demo/config?format=toml"), 422, "ValidationError")
    assert message.startswith("query.format:")
    message = _error(client.get("/v1/campaigns/1/trials?limit=0&offset=-1"), 422,
                     "ValidationError")
    assert "query.offset" in message and "query.limit" in message
    _error(client.get("/v1/campaigns/not-a-number"), 422, "ValidationError")
    _error(client.get("/v1/deployments/bad%20name/config"), 422, "ValidationError")
    auth = {"Authorization": "Bearer s3cret"}
    r = client.post("/v1/deployments/demo/publish", content=b"{not json",
                    headers={**auth, "Content-Type": "application/json"})
    _error(r, 422, "ValidationError")
    message = _error(client.post("/v1/deployments/demo/publish", headers=auth,
                                 json={"campaign": "2026Q4", "trial": -1}), 422, "ValidationError")
    assert "body.trial" in message


def test_refused_writes_are_401_and_403(client: TestClient, seeded: Seeded) -> None:
    r = client.post("/v1/deployments/demo/publish", json={"campaign": "2026Q4"})
    _error(r, 401, "Unauthorized")
    assert r.headers["www-authenticate"] == "Bearer"
    with TestClient(_app(seeded.url)) as no_token:
        message = _error(no_token.post("/v1/deployments/demo/rollback"), 403, "Forbidden")
    assert "AUTOTUNE_API__TOKEN" in message


def test_autotune_errors_keep_their_class_name(client: TestClient) -> None:
    assert "autotune publish" not in _error(client.get("/v1/campaigns/99"), 404, "NotFoundError")
    assert _error(client.get("/test/config-error"), 400, "ConfigError") == "bad flag; use another"
    assert "capture some traffic" in _error(client.get("/test/trace-error"), 500, "TraceError")


def test_unhandled_exception_is_500_without_the_traceback(
        client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("ERROR", logger="autotune.api"):
        r = client.get("/test/boom")
    message = _error(r, 500, "InternalError")
    assert "hunter2" not in r.text and "Traceback" not in r.text and "RuntimeError" not in r.text
    assert "log" in message
    logged = [rec for rec in caplog.records if rec.exc_info]
    assert logged and "/test/boom" in logged[0].getMessage()
    assert client.get("/healthz").status_code == 200  # the server goes on


def test_unreachable_database_is_503_not_500(tmp_path: Path) -> None:
    url = "postgresql+psycopg://autotune@127.0.0.1:1/autotune"
    with TestClient(_app(url), raise_server_exceptions=False) as c:
        r = c.get("/v1/campaigns")
        message = _error(r, 503, "DatabaseUnavailable")
        assert "127.0.0.1" not in message and "/readyz" in message
        assert "cannot reach the database" in _error(c.get("/readyz"), 503, "ServiceUnavailable")
