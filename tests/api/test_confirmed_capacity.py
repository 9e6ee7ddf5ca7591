"""The API and the Prometheus gauge publish the confirmed capacity of a confirmed config (not the
search's draw), name its basis, and read a publication without confirmation as before."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from autotune.api.app import create_app
from autotune.campaign.confirm import stats
from autotune.settings import Settings
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign, Confirmation
from tests.api.seed import CAPACITIES_OUTPUT_TOK_S, Seeded, seed_database

RUNS = (1650.0, 1700.0, 1580.0)  # the published trial re-run: below its search draw of 1800


def _confirm_published(seeded: Seeded) -> None:
    engine = open_database(seeded.url)
    with session_scope(engine) as s:
        c = s.get(Campaign, seeded.campaign_id)
        assert c is not None
        trial = next(t for t in c.trials if t.number == seeded.published_trial)
        st = stats(RUNS)
        s.add(Confirmation(
            campaign_id=c.id, trial_id=trial.id, role=trial.role,
            engine_config=trial.engine_config, seeds=[1, 2, 3], samples=list(RUNS),
            failures=[None] * 3, n=st.n, mean_output_tok_s=st.mean, std_output_tok_s=st.std,
            cv=st.cv, lcb_output_tok_s=st.lcb, gpu_hours=0.0, winner=True,
            created_at=datetime.now(UTC)))
    engine.dispose()


@pytest.fixture
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    seeded = seed_database(f"sqlite:///{tmp_path_factory.mktemp('confirmed') / 'a.db'}")
    _confirm_published(seeded)
    with TestClient(create_app(Settings(database_url=seeded.url))) as c:
        yield c


def test_the_config_and_history_give_the_confirmed_capacity(client: TestClient) -> None:
    doc = client.get("/v1/deployments/demo/config").json()
    st = stats(RUNS)
    search = max(CAPACITIES_OUTPUT_TOK_S)
    assert doc["capacity_output_tok_s"] == pytest.approx(st.mean) != search
    assert doc["capacity_basis"] == "confirmed_mean"
    assert doc["search_output_tok_s"] == search
    assert doc["confirmed_mean_output_tok_s"] == pytest.approx(st.mean)
    assert doc["confirmed_std_output_tok_s"] == pytest.approx(st.std)
    assert doc["confirmed_lcb_output_tok_s"] == pytest.approx(st.lcb)
    assert doc["confirmed_runs"] == 3
    entry = client.get("/v1/deployments/demo/history").json()["publications"][0]
    assert entry["capacity_output_tok_s"] == pytest.approx(st.mean)
    assert entry["capacity_basis"] == "confirmed_mean"


def test_the_gauge_is_the_confirmed_capacity(client: TestClient) -> None:
    text = client.get("/metrics").text
    samples = {(s.name, tuple(s.labels.values())): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    st = stats(RUNS)
    assert samples[("autotune_published_capacity_output_tokens_per_second", ("demo",))] == \
        pytest.approx(st.mean)
    assert samples[("autotune_published_capacity_lcb_output_tokens_per_second", ("demo",))] == \
        pytest.approx(st.lcb)


def test_an_unconfirmed_publication_reads_as_before(tmp_path_factory: pytest.TempPathFactory,
                                                    ) -> None:
    seeded = seed_database(f"sqlite:///{tmp_path_factory.mktemp('plain') / 'a.db'}")
    with TestClient(create_app(Settings(database_url=seeded.url))) as c:
        doc = c.get("/v1/deployments/demo/config").json()
        text = c.get("/metrics").text
    assert doc["capacity_output_tok_s"] == doc["search_output_tok_s"] == max(CAPACITIES_OUTPUT_TOK_S)
    assert doc["capacity_basis"] == "search_measurement"
    assert doc["confirmed_mean_output_tok_s"] is None and doc["confirmed_runs"] is None
    assert "autotune_published_capacity_lcb_output_tokens_per_second{" not in text
