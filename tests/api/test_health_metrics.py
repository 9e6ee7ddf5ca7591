"""/healthz, /readyz and the Prometheus /metrics."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from autotune.api.app import create_app
from autotune.settings import Settings
from tests.api.seed import Seeded, seed_database

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed_database(f"sqlite:///{tmp_path_factory.mktemp('metrics') / 'a.db'}")


@pytest.fixture
def client(seeded: Seeded) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(database_url=seeded.url))) as c:
        yield c


def _samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def _count(samples: dict, route: str, status: str, method: str = "GET") -> float:  # type: ignore[type-arg]
    key = ("autotune_api_requests_total",
           (("method", method), ("route", route), ("status", status)))
    return float(samples.get(key, 0.0))


def test_healthz_and_readyz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "detail": None}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ok"
    assert "revision" in ready.json()["detail"]


def test_readyz_is_503_on_an_unmigrated_database_but_healthz_is_up(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    sa.create_engine(url).connect().close()
    with TestClient(create_app(Settings(database_url=url))) as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/readyz")
    assert r.status_code == 503 and r.json()["error"]["type"] == "ServiceUnavailable"
    assert "revision none" in r.json()["error"]["message"]


def test_readyz_on_a_missing_database_creates_nothing(tmp_path: Path) -> None:
    from autotune.storage.db import upgrade

    db = tmp_path / "not yet" / "autotune.db"
    db.parent.mkdir()
    url = f"sqlite:///{db}"
    with TestClient(create_app(Settings(database_url=url))) as c:
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json()["error"]["type"] == "ServiceUnavailable"
        assert "unable to open database file" in r.json()["error"]["message"]
        assert c.get("/v1/campaigns").status_code == 503
        assert list(db.parent.iterdir()) == []  # no empty file, no -wal or -shm
        upgrade(url)  # the database appears: the same server becomes ready
        assert c.get("/readyz").status_code == 200


def test_request_counts_move_by_route_template(client: TestClient, seeded: Seeded) -> None:
    config_route = "/v1/deployments/{name}/config"
    before = _samples(client)
    for _ in range(3):
        assert client.get("/v1/deployments/demo/config").status_code == 200
    assert client.get("/v1/deployments/other/config").status_code == 404
    for i in range(5):  # unknown paths share one series
        assert client.get(f"/scan/{i}").status_code == 404
    after = _samples(client)
    assert _count(after, config_route, "200") - _count(before, config_route, "200") == 3
    assert _count(after, config_route, "404") - _count(before, config_route, "404") == 1
    assert _count(after, "unmatched", "404") - _count(before, "unmatched", "404") == 5
    routes = {dict(labels)["route"] for name, labels in after
              if name == "autotune_api_requests_total"}
    assert not any("/scan/" in r or r.endswith("/demo/config") for r in routes), routes
    hist = ("autotune_api_request_duration_seconds_count",
            (("method", "GET"), ("route", config_route), ("status", "200")))
    assert after[hist] - before.get(hist, 0.0) == 3
    assert after[("autotune_api_request_duration_seconds_sum", hist[1])] > 0


def test_published_configs_are_exported(client: TestClient, seeded: Seeded) -> None:
    samples = _samples(client)
    assert samples[("autotune_api_database_up", ())] == 1.0
    info = ("autotune_published_config_info",
            (("campaign", seeded.campaign), ("deployment", seeded.deployment),
             ("period", "2026Q4"), ("trial", str(seeded.published_trial))))
    assert samples[info] == 1.0
    capacity = samples[("autotune_published_capacity_output_tokens_per_second",
                        (("deployment", seeded.deployment),))]
    assert capacity == 1800.0
    assert samples[("autotune_published_timestamp_seconds",
                    (("deployment", seeded.deployment),))] > 1.7e9


def test_metrics_survive_an_unreachable_database() -> None:
    url = "postgresql+psycopg://autotune@127.0.0.1:1/autotune"
    with TestClient(create_app(Settings(database_url=url))) as c:
        samples = _samples(c)
    assert samples[("autotune_api_database_up", ())] == 0.0
    assert not any(name.startswith("autotune_published") for name, _ in samples)
