"""Reads open or token-protected by setting; writes always need the token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from autotune.api.app import create_app
from autotune.api.deps import token_matches
from autotune.settings import Settings
from tests.api.seed import Seeded, seed_database

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

READS = ["/v1/deployments/demo/config", "/v1/deployments/demo/config?format=yaml",
         "/v1/deployments/demo/history", "/v1/campaigns", "/v1/campaigns/1",
         "/v1/campaigns/1/trials", "/metrics"]
OPEN = ["/healthz", "/readyz", "/openapi.json", "/docs"]
AUTH = {"Authorization": "Bearer s3cret"}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed_database(f"sqlite:///{tmp_path_factory.mktemp('auth') / 'a.db'}")


def _client(seeded: Seeded, **api: Any) -> TestClient:
    return TestClient(create_app(Settings(database_url=seeded.url, api=api)))  # type: ignore[arg-type]


@pytest.fixture
def protected(seeded: Seeded) -> Iterator[TestClient]:
    with _client(seeded, token="s3cret", protect_reads=True) as c:
        yield c


def test_reads_are_open_by_default(seeded: Seeded) -> None:
    with _client(seeded, token="s3cret") as c:
        for path in READS + OPEN:
            assert c.get(path).status_code == 200, path


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"Authorization": "s3cret"},
                                     {"Authorization": "Basic czNjcmV0"},
                                     {"Authorization": "Bearer s3cret2"}])
def test_protected_reads_refuse_a_missing_or_wrong_token(
        protected: TestClient, headers: dict[str, str]) -> None:
    for path in READS:
        r = protected.get(path, headers=headers)
        assert r.status_code == 401, (path, headers)
        assert r.json()["error"]["type"] == "Unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"


def test_protected_reads_answer_the_token_and_probes_stay_open(protected: TestClient) -> None:
    for path in READS:
        assert protected.get(path, headers=AUTH).status_code == 200, path
    for path in OPEN:
        assert protected.get(path).status_code == 200, path
    # An unknown route is still a 404, not a hint that a token would help.
    assert protected.get("/v1/nothing").status_code == 404


def test_writes_need_the_token_whether_reads_are_protected_or_not(seeded: Seeded) -> None:
    for protect in (False, True):
        with _client(seeded, token="s3cret", protect_reads=protect) as c:
            before = c.get("/v1/deployments/demo/history", headers=AUTH).json()
            assert c.post("/v1/deployments/demo/rollback").status_code == 401
            assert c.post("/v1/deployments/demo/publish", json={"campaign": "2026Q4"},
                          headers={"Authorization": "Bearer nope"}).status_code == 401
            assert c.get("/v1/deployments/demo/history", headers=AUTH).json() == before


def test_openapi_declares_the_bearer_scheme_where_it_is_enforced(seeded: Seeded) -> None:
    def secured(c: TestClient) -> dict[str, bool]:
        paths = c.get("/openapi.json").json()["paths"]
        return {f"{method.upper()} {path}": bool(op.get("security"))
                for path, ops in paths.items() for method, op in ops.items()}

    with _client(seeded, token="s3cret") as c:
        open_reads = secured(c)
    with _client(seeded, token="s3cret", protect_reads=True) as c:
        closed_reads = secured(c)
        schemes = c.get("/openapi.json").json()["components"]["securitySchemes"]
    assert schemes == {"bearer": {"type": "http", "scheme": "bearer",
                                  "description": "The server's AUTOTUNE_API__TOKEN."}}
    for table in (open_reads, closed_reads):
        assert table["POST /v1/deployments/{name}/publish"]
        assert table["POST /v1/deployments/{name}/rollback"]
        assert not table["GET /healthz"] and not table["GET /readyz"]
    assert not open_reads["GET /v1/deployments/{name}/config"]
    assert closed_reads["GET /v1/deployments/{name}/config"]
    assert closed_reads["GET /v1/campaigns/{campaign_id}/trials"]


def test_token_comparison() -> None:
    assert token_matches("s3cret", "s3cret")
    for given in ("", "s3cre", "s3cret ", "S3CRET", "s3cretx" * 100):
        assert not token_matches(given, "s3cret")
    assert token_matches("tökén", "tökén") and not token_matches("token", "tökén")
