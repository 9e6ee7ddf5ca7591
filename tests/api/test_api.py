"""The API in-process, over a database that holds a real (small) campaign."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from autotune.api.app import create_app
from autotune.campaign.study import CampaignRequest, StudyController
from autotune.domain.deployment import DEMO
from autotune.domain.engine_config import EngineConfig
from autotune.domain.slo import parse_slo
from autotune.measure.executors import InlineExecutor
from autotune.release.publish import publish_campaign
from autotune.settings import Settings
from autotune.storage.db import open_database, session_scope, upgrade
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('api') / 'a.db'}"
    upgrade(url)
    engine = open_database(url)
    request = CampaignRequest(deployment=DEMO, campaign="2026Q4", slo=parse_slo("ttft_p99<=2s"),
                              trace=load_trace(DEMO_TRACE), trace_ref=str(DEMO_TRACE),
                              max_trials=4)
    StudyController(engine, url, request, InlineExecutor()).run()
    engine.dispose()
    return url


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=db_url))) as c:
        yield c


def test_health(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "detail": None}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ok"


def test_config_before_and_after_publication(client: TestClient, db_url: str) -> None:
    missing = client.get("/v1/deployments/demo/config")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "NotFoundError"
    assert "autotune publish" in missing.json()["error"]["message"]

    engine = open_database(db_url)
    with session_scope(engine) as s:
        pub = publish_campaign(s, "2026Q4", deployment="demo", trial_number=None,
                               period_label=None, published_by="test", note="first")
        best_config, best_number = dict(pub.engine_config), pub.trial.number
    engine.dispose()

    body = client.get("/v1/deployments/demo/config").json()
    assert body["engine_args"] == best_config and body["trial"] == best_number
    assert body["cli_args"] == EngineConfig(**best_config).to_cli_args()
    assert body["period"] == "2026Q4" and body["note"] == "first"
    history = client.get("/v1/deployments/demo/history").json()
    assert [h["trial"] for h in history["publications"]] == [best_number]


def test_unknown_deployment_is_one_json_error(client: TestClient) -> None:
    r = client.get("/v1/deployments/nope/config")
    assert r.status_code == 404 and set(r.json()) == {"error"}
    assert client.get("/v1/nothing").json()["error"]["type"] == "NotFound"


def test_readyz_fails_on_an_unmigrated_database(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    sa.create_engine(url).connect().close()
    with TestClient(create_app(Settings(database_url=url))) as c:
        r = c.get("/readyz")
    assert r.status_code == 503 and set(r.json()) == {"error"}
    assert "autotune db upgrade" in r.json()["error"]["message"]


def test_period_label_defaults() -> None:
    from datetime import UTC, datetime

    from autotune.release.publish import default_period

    assert default_period("2026Q4", datetime(2027, 1, 3, tzinfo=UTC)) == "2026Q4"
    assert default_period("demo", datetime(2027, 1, 3, tzinfo=UTC)) == "2027Q1"
    assert default_period("demo", datetime(2026, 12, 31, tzinfo=UTC)) == "2026Q4"


def test_config_formats_etag_and_cache_headers(client: TestClient, db_url: str) -> None:
    if client.get("/v1/deployments/demo/config").status_code == 404:
        engine = open_database(db_url)
        with session_scope(engine) as s:
            publish_campaign(s, "2026Q4", deployment="demo", trial_number=None, period_label=None,
                             published_by="test", note=None)
        engine.dispose()
    r = client.get("/v1/deployments/demo/config")
    assert r.status_code == 200 and r.headers["cache-control"].startswith("public, max-age=")
    etag = r.headers["etag"]
    assert client.get("/v1/deployments/demo/config",
                      headers={"If-None-Match": etag}).status_code == 304
    yaml_text = client.get("/v1/deployments/demo/config?format=yaml")
    assert yaml_text.headers["content-type"].startswith("application/yaml")
    assert yaml_text.text == r.json()["yaml"]
    args = client.get("/v1/deployments/demo/config?format=args").text.splitlines()
    assert args == r.json()["cli_args"]
    bad = client.get("/v1/deployments/demo/config?format=toml")
    assert bad.status_code == 422 and set(bad.json()) == {"error"}


def test_a_revalidation_reads_little_and_a_new_publication_changes_the_etag(
        client: TestClient, db_url: str) -> None:
    engine = open_database(db_url)
    with session_scope(engine) as s:
        publish_campaign(s, "2026Q4", deployment="demo", trial_number=None, period_label=None,
                         published_by="etag-test", note=None)
    first = client.get("/v1/deployments/demo/config")
    etag = first.headers["etag"]
    statements: list[str] = []
    app_engine = client.app.state.engine  # type: ignore[attr-defined]

    def record(_conn, _cursor, sql, *_args) -> None:  # type: ignore[no-untyped-def]
        statements.append(sql)

    sa.event.listen(app_engine, "before_cursor_execute", record)
    try:
        again = client.get("/v1/deployments/demo/config", headers={"If-None-Match": etag})
    finally:
        sa.event.remove(app_engine, "before_cursor_execute", record)
    assert again.status_code == 304 and again.headers["etag"] == etag and again.content == b""
    # The deployment and the current publication's key; not the trial, campaign or document.
    queries = [q for q in statements if q.lstrip().upper().startswith("SELECT")]
    assert len(queries) == 2, queries
    with session_scope(engine) as s:  # the same config published again: another publication
        publish_campaign(s, "2026Q4", deployment="demo", trial_number=None, period_label=None,
                         published_by="etag-test", note="again")
    engine.dispose()
    changed = client.get("/v1/deployments/demo/config", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    assert changed.json()["note"] == "again"


def test_campaigns_and_paginated_trials(client: TestClient) -> None:
    campaigns = client.get("/v1/campaigns").json()["campaigns"]
    assert [c["name"] for c in campaigns] == ["2026Q4"]
    c = campaigns[0]
    assert c["status"] == "completed" and c["deployment"] == "demo" and c["best_trial"] is not None
    assert client.get(f"/v1/campaigns/{c['id']}").json() == c
    page = client.get(f"/v1/campaigns/{c['id']}/trials?limit=2").json()
    assert page["total"] == c["trials"] and len(page["trials"]) == min(2, c["trials"])
    assert [t["number"] for t in page["trials"]] == sorted(t["number"] for t in page["trials"])
    rest = client.get(f"/v1/campaigns/{c['id']}/trials?offset=2&limit=500").json()["trials"]
    assert len(page["trials"]) + len(rest) == c["trials"]
    measured = client.get(f"/v1/campaigns/{c['id']}/trials?state=measured").json()
    assert all(t["state"] == "measured" for t in measured["trials"])
    assert client.get("/v1/campaigns/999").status_code == 404
    assert client.get(f"/v1/campaigns/{c['id']}/trials?state=odd").status_code == 422


def test_writes_need_the_bearer_token_and_change_nothing_without_it(db_url: str) -> None:
    with TestClient(create_app(Settings(database_url=db_url))) as open_client:
        before = open_client.get("/v1/deployments/demo/history").json()
        r = open_client.post("/v1/deployments/demo/publish", json={"campaign": "2026Q4"},
                             headers={"Authorization": "Bearer anything"})
        assert r.status_code == 403 and "AUTOTUNE_API__TOKEN" in r.json()["error"]["message"]
    settings = Settings(database_url=db_url, api={"token": "s3cret"})  # type: ignore[arg-type]
    with TestClient(create_app(settings)) as c:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = c.post("/v1/deployments/demo/publish", json={"campaign": "2026Q4"},
                       headers=headers)
            assert r.status_code == 401, headers
        assert c.post("/v1/deployments/demo/rollback").status_code == 401
        assert c.get("/v1/deployments/demo/history").json() == before

        auth = {"Authorization": "Bearer s3cret"}
        trials = c.get("/v1/campaigns/1/trials?state=measured").json()["trials"]
        feasible = [t["number"] for t in trials if t["feasible"]]
        first = c.post("/v1/deployments/demo/publish", headers=auth,
                       json={"campaign": "2026Q4", "trial": feasible[-1], "note": "by API"})
        assert first.status_code == 200 and first.json()["trial"] == feasible[-1]
        best = c.post("/v1/deployments/demo/publish", headers=auth, json={"campaign": "2026Q4"})
        assert best.json()["trial"] == c.get("/v1/campaigns/1").json()["best_trial"]
        back = c.post("/v1/deployments/demo/rollback", headers=auth)
        assert back.status_code == 200 and back.json()["trial"] == feasible[-1]
        assert c.get("/v1/deployments/demo/config").json()["trial"] == feasible[-1]
        history = c.get("/v1/deployments/demo/history").json()["publications"]
        assert len(history) == len(before["publications"]) + 3
        missing = c.post("/v1/deployments/demo/publish", headers=auth, json={"campaign": "nope"})
        assert missing.status_code == 404 and set(missing.json()) == {"error"}


def test_a_trial_with_a_null_constraint_is_listed(db_url: str) -> None:
    """A constraint stored as null (a value with no JSON form, such as infinity) is listed as
    null, not a 500."""
    from autotune.storage.models import Trial

    engine = open_database(db_url)
    with session_scope(engine) as s:
        trial = s.scalars(sa.select(Trial).order_by(Trial.id)).first()
        assert trial is not None and trial.constraints
        key = next(iter(trial.constraints))
        old, trial.constraints = dict(trial.constraints), {**trial.constraints, key: None}
        number, campaign_id = trial.number, trial.campaign_id
    try:
        with TestClient(create_app(Settings(database_url=db_url))) as c:
            resp = c.get(f"/v1/campaigns/{campaign_id}/trials?limit=500")
        assert resp.status_code == 200, resp.text
        (listed,) = [t for t in resp.json()["trials"] if t["number"] == number]
        assert listed["constraints"][key] is None
    finally:
        with session_scope(engine) as s:
            s.scalars(sa.select(Trial).where(Trial.number == number,
                                           Trial.campaign_id == campaign_id)).one().constraints = old
        engine.dispose()
