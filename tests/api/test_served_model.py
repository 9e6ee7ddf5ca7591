"""The published YAML names the model (`vllm serve --config config.yaml` needs it: see
tests/search/test_engine_config_vllm.py): the path or id the deployment's real engines loaded,
else the catalogue's Hugging Face id; fixed at publication, and old publications stay readable."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from fastapi.testclient import TestClient

from autotune.api.app import create_app
from autotune.campaign.claim import claim_campaign
from autotune.campaign.study import CampaignRequest, StudyController
from autotune.domain.deployment import DEMO
from autotune.domain.slo import parse_slo
from autotune.measure.executors import InlineExecutor
from autotune.release.publish import publish_campaign
from autotune.settings import Settings
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope, upgrade
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE

pytestmark = pytest.mark.e2e  # a whole (simulated) campaign: not the fast tier

HF_ID = "deepseek-ai/DeepSeek-V4-Flash"  # the catalogue's id of DEMO's model


def _request(**changes: object) -> CampaignRequest:
    request = CampaignRequest(deployment=DEMO, campaign="2026Q4", slo=parse_slo("ttft_p99<=2s"),
                              trace=load_trace(DEMO_TRACE), trace_ref=str(DEMO_TRACE),
                              max_trials=3, confirm=None)
    return replace(request, **changes)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('served') / 'a.db'}"
    upgrade(url)
    engine = open_database(url)
    StudyController(engine, url, _request(), InlineExecutor()).run()
    engine.dispose()
    return url


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        yield c


def _publish(url: str, model_path: str | None = None) -> None:
    engine = open_database(url)
    with session_scope(engine) as s:
        if model_path is not None:
            repo.get_deployment(s, "demo").model_path = model_path
        publish_campaign(s, "2026Q4", deployment="demo", trial_number=None, period_label=None,
                         published_by="test", note=None)
    engine.dispose()


def test_the_yaml_names_the_catalogue_id_then_the_deployment_path(client: TestClient,
                                                                  db_url: str) -> None:
    _publish(db_url)
    doc = client.get("/v1/deployments/demo/config").json()
    assert doc["model"] == "DeepSeek-V4-Flash" and doc["served_model"] == HF_ID
    assert doc["yaml"].splitlines()[0] == f"model: {HF_ID}"
    assert {k: v for k, v in yaml.safe_load(doc["yaml"]).items() if k != "model"}
    assert client.get("/v1/deployments/demo/config?format=yaml").text == doc["yaml"]

    _publish(db_url, model_path="/models/dsv4-flash")
    now = client.get("/v1/deployments/demo/config").json()
    assert now["served_model"] == "/models/dsv4-flash"
    assert yaml.safe_load(now["yaml"])["model"] == "/models/dsv4-flash"

    # A later path leaves what was published as it was; a rollback names what it restores.
    engine = open_database(db_url)
    with session_scope(engine) as s:
        repo.get_deployment(s, "demo").model_path = "/models/elsewhere"
    engine.dispose()
    history = client.get("/v1/deployments/demo/history").json()["publications"]
    assert client.get("/v1/deployments/demo/config").json()["yaml"] == now["yaml"]
    assert len(history) == 2
    with TestClient(create_app(Settings(database_url=db_url, api={"token": "t"}))) as c:
        back = c.post("/v1/deployments/demo/rollback", headers={"Authorization": "Bearer t"})
    assert back.status_code == 200 and back.json()["served_model"] == HF_ID


def test_a_publication_from_before_served_model_reads(client: TestClient, db_url: str) -> None:
    _publish(db_url, model_path="/models/any")
    engine = open_database(db_url)
    with engine.begin() as conn:  # what rows written before migration 0006 hold
        conn.execute(sa.text("UPDATE autotune_publications SET served_model = NULL"))
    engine.dispose()
    doc = client.get("/v1/deployments/demo/config").json()
    assert doc["served_model"] == HF_ID and yaml.safe_load(doc["yaml"])["model"] == HF_ID


def test_a_real_engine_campaign_records_its_model_path(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/b.db"
    upgrade(url)
    engine = open_database(url)
    claim_campaign(engine, _request(backend="vllm", backend_options={"model_path": "/m/tiny"}),
                   lease_s=60)
    with session_scope(engine) as s:
        assert repo.get_deployment(s, "demo").model_path == "/m/tiny"
    engine.dispose()
