"""The OpenAPI document and docs are served, and schemathesis finds no failure against them.

schemathesis 4.x: `schemathesis.openapi.from_asgi` loads the app's own document in-process, and
`case.call_and_validate` calls the app over ASGI and runs every built-in check (no 5xx; status
codes, content types and bodies as documented; auth not ignored; bad input refused; ...).

The schema is loaded at import (its `from_fixture` loader touches a private pytest attribute
that pytest 9 removed), so the app points at a database file that a module fixture seeds before
any call: responses are then real configs, campaigns and trials, not all 404s.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings

from autotune.api.app import create_app
from autotune.settings import Settings
from tests.api.seed import seed_database

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

AUTH = {"Authorization": "Bearer s3cret"}


_DIR = Path(tempfile.mkdtemp(prefix="autotune-openapi-"))
atexit.register(shutil.rmtree, _DIR, True)
DB_URL = f"sqlite:///{_DIR / 'a.db'}"
# Making the app and its engine touches no database; the first request does.
schema = schemathesis.openapi.from_asgi(
    "/openapi.json", create_app(Settings(database_url=DB_URL, api={"token": "s3cret"})))  # type: ignore[arg-type]


@pytest.fixture(scope="module", autouse=True)
def seeded_url() -> str:
    return seed_database(DB_URL).url


def test_docs_and_openapi_are_served(seeded_url: str) -> None:
    with TestClient(create_app(Settings(database_url=seeded_url))) as c:
        spec = c.get("/openapi.json").json()
        docs = c.get("/docs")
    assert spec["info"]["title"] == "autotune"
    assert {"/v1/deployments/{name}/config", "/v1/campaigns/{campaign_id}/trials", "/healthz",
            "/readyz", "/metrics"} <= set(spec["paths"])
    assert docs.status_code == 200 and "/openapi.json" in docs.text and "swagger" in docs.text
    # Validation errors are documented in the one error shape, not FastAPI's default.
    config_422 = spec["paths"]["/v1/deployments/{name}/config"]["get"]["responses"]["422"]
    assert config_422["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
    assert "HTTPValidationError" not in spec["components"]["schemas"]


@schema.parametrize()
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_document(case: Any) -> None:
    case.call_and_validate(headers=AUTH)
