"""Accuracy-affecting values: judged on configs (pins excepted), taken out of a forbidding
deployment's space and refused in its references, and flagged under the winner in the summary,
`tune --json`, the HTML report and the published document."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from rich.console import Console

from autotune.campaign.study import CampaignRequest, Reference, StudyController
from autotune.cli import json_views
from autotune.cli.report import print_campaign_result
from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.slo import parse_slo
from autotune.errors import ConfigError
from autotune.measure.executors import InlineExecutor
from autotune.release.publish import config_document, publish_trial
from autotune.release.report import data as report_data
from autotune.release.report import html
from autotune.release.result import campaign_result
from autotune.search.spaces import accuracy
from autotune.search.spaces.deployment import deployment_space, load_search_space, space_summary
from autotune.storage import repo
from autotune.storage.db import alembic_config, open_database, session_scope, upgrade
from autotune.storage.models import Campaign
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE
from autotune.vocabulary import Role

V3 = DeploymentSpec.build(name="v3", model="DeepSeek-V3", gpu="H200-141GB", gpu_count=8,
                          tensor_parallel_size=8, max_model_len=16384)
V3_STRICT = V3.model_copy(update={"name": "v3-strict", "allow_accuracy_affecting": False})
LLAMA = DeploymentSpec.build(name="llama", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=1,
                             tensor_parallel_size=1, max_model_len=8192)
MTP = {"method": "mtp", "num_speculative_tokens": 2}


def test_fp8_kv_and_drafting_change_numerics_unless_the_model_requires_them() -> None:
    chat = load_search_space("chat")
    found = accuracy.changes({"kv_cache_dtype": "fp8", "block_size": 64,
                              "speculative_config": MTP}, chat, {})
    assert [(c.name, c.value) for c in found] == [("kv_cache_dtype", "fp8"),
                                                  ("speculative_config", MTP)]
    assert found[0].text().startswith("kv_cache_dtype=fp8 (an 8-bit KV cache")
    assert accuracy.changes({"kv_cache_dtype": "auto"}, chat, {}) == []
    # Without a space (its file gone) the built-in judgement still applies.
    assert [c.name for c in accuracy.changes({"kv_cache_dtype": "fp8_e5m2"}, None, {})] == \
        ["kv_cache_dtype"]
    # DeepSeek-V4 on Hopper runs an fp8 cache whatever is asked: its pin is no change.
    assert accuracy.changes({"kv_cache_dtype": "fp8"}, chat, {"kv_cache_dtype": "fp8"}) == []


def test_a_forbidding_deployment_searches_no_fp8_and_says_so() -> None:
    assert "fp8" in deployment_space("chat", V3).param("kv_cache_dtype").choices
    space = deployment_space("chat", V3_STRICT)
    assert space.param("kv_cache_dtype").choices == ("auto",)
    assert ("Accuracy-affecting values left out (the deployment forbids them): "
            "kv_cache_dtype=fp8") in space_summary(space, V3_STRICT)
    # The model's own fp8 cache stays pinned where the deployment forbids the choice.
    v4 = deployment_space("chat", DEMO.model_copy(update={"allow_accuracy_affecting": False}))
    assert v4.pinned["kv_cache_dtype"] == "fp8" and "kv_cache_dtype" not in v4.left_out


def _request(dep: DeploymentSpec, **values) -> CampaignRequest:  # type: ignore[no-untyped-def]
    return CampaignRequest(deployment=dep, campaign="c", slo=parse_slo("ttft_p99<=2s,tpot_p99<=50ms"),
                           trace=load_trace(DEMO_TRACE), trace_ref=str(DEMO_TRACE),
                           search_space="chat", **values)


def test_a_warm_start_needing_fp8_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    upgrade(url)
    engine = open_database(url)
    warm = Reference("warm-start 2026Q3#7", Role.WARM_START,
                     {"max_num_seqs": 256, "kv_cache_dtype": "fp8"})
    try:
        with pytest.raises(ConfigError) as exc:
            StudyController(engine, url, _request(V3_STRICT, references=(warm,)), InlineExecutor())
        assert "deployment 'v3-strict' forbids accuracy-affecting values, but the warm-start " \
               "warm-start 2026Q3#7 runs kv_cache_dtype=fp8" in str(exc.value)
        # The same reference is fine where the deployment allows it.
        StudyController(engine, url, _request(V3, references=(warm,)), InlineExecutor())
        with session_scope(engine) as s:
            assert s.scalar(sa.select(sa.func.count()).select_from(Campaign)) == 0
    finally:
        engine.dispose()


def _kv_dtypes(url: str, dep: DeploymentSpec) -> list[str]:
    upgrade(url)
    engine = open_database(url)
    try:
        # Random draws: a sampler that never tried fp8 would prove nothing.
        cid = StudyController(engine, url, _request(dep, max_trials=8, sampler="random", seed=0),
                              InlineExecutor()).run()
        with session_scope(engine) as s:
            c = s.get(Campaign, cid)
            assert c is not None and c.status == "completed"
            return [str(t.engine_config.get("kv_cache_dtype")) for t in c.trials]
    finally:
        engine.dispose()


@pytest.mark.e2e  # two whole simulated campaigns
def test_a_forbidding_deployment_never_samples_fp8_kv(tmp_path: Path) -> None:
    strict = LLAMA.model_copy(update={"allow_accuracy_affecting": False})
    assert "fp8" in _kv_dtypes(f"sqlite:///{tmp_path / 'a.db'}", LLAMA)  # same seed, allowed
    assert set(_kv_dtypes(f"sqlite:///{tmp_path / 'f.db'}", strict)) == {"auto"}


def _seed_fp8_winner(url: str) -> int:
    """A completed V3 campaign (chat space) whose best trial runs an fp8 KV cache."""
    upgrade(url)
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            dep = repo.ensure_deployment(s, V3)
            when = repo.now()
            campaign = Campaign(
                deployment_id=dep.id, name="c1", slo={"ttft_p99_ms": 2000.0}, trace_ref="t",
                trace_digest="0123", backend="sim", executor="inline", search_space="chat",
                study_name="v3:c1", max_trials=2, seed=0, status="completed", started_at=when,
                finished_at=when, wall_s=1.0)
            s.add(campaign)
            s.flush()
            for number, (role, kv, capacity) in enumerate(
                    [(Role.VLLM_DEFAULT, "auto", 1000.0), ("proposed", "fp8", 1500.0)]):
                repo.add_trial(
                    s, campaign, number=number, role=role,
                    engine_config={"max_num_seqs": 256, "kv_cache_dtype": kv},
                    state="measured", feasible=True, capacity_output_tok_s=capacity,
                    capacity_rate_scale=4.0, latency={"ttft_p99_ms": 900.0},
                    latency_recorded_rate=None, constraints={"ttft_p99": -0.5}, replays=[],
                    failure_class=None, failure_message=None, start_s=1.0, measure_s=2.0,
                    started_at=when, worker={}, telemetry={})
            return campaign.id
    finally:
        engine.dispose()


def test_an_fp8_winner_is_flagged_in_the_summary_json_report_and_publication(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    cid = _seed_fp8_winner(url)
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            campaign = s.get(Campaign, cid)
            assert campaign is not None
            console = Console(record=True, width=200)
            print_campaign_result(console, campaign_result(s, campaign))
            lines = console.export_text().splitlines()
            flag = next(i for i, line in enumerate(lines) if line.startswith("Changes numerics"))
            assert lines[flag] == ("Changes numerics: kv_cache_dtype=fp8 (an 8-bit KV cache "
                                   "rounds the keys and values attention reads)")
            assert "--kv-cache-dtype fp8" in lines[flag - 1]  # under the winner's arguments

            view = json_views.campaign_result(campaign_result(s, campaign))
            assert [(c["name"], c["value"]) for c in view["winner"]["accuracy_affecting"]] == \
                [("kv_cache_dtype", "fp8")]
            assert "accuracy_affecting" not in view["baselines"][0]

            page = html.render(report_data.gather(s, campaign, url),
                               images={"throughput": "t.png", "capacity": "c.png"},
                               generated_at=datetime.now(UTC))
            assert 'id="accuracy-note"' in page and "kv_cache_dtype=fp8" in page

            best = repo.best_trial(campaign)
            assert best is not None
            pub = publish_trial(s, campaign, best, period_label="2026Q4", published_by="t",
                               note=None)
            assert [c["value"] for c in config_document(pub)["accuracy_affecting"]] == ["fp8"]
    finally:
        engine.dispose()


def test_an_auto_winner_is_not_flagged(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    cid = _seed_fp8_winner(url)
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            campaign = s.get(Campaign, cid)
            assert campaign is not None
            for t in campaign.trials:  # the fp8 trial fails: the auto one wins
                t.feasible = t.engine_config["kv_cache_dtype"] == "auto"
            s.flush()
            console = Console(record=True, width=200)
            result = campaign_result(s, campaign)
            print_campaign_result(console, result)
            assert "Changes numerics" not in console.export_text()
            assert json_views.campaign_result(result)["winner"]["accuracy_affecting"] == []
            page = html.render(report_data.gather(s, campaign, url),
                               images={"throughput": "t.png", "capacity": "c.png"},
                               generated_at=datetime.now(UTC))
            assert 'id="accuracy-note"' not in page
    finally:
        engine.dispose()


def test_rows_from_before_the_migration_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    cid = _seed_fp8_winner(url)
    engine = open_database(url)
    with session_scope(engine) as s:
        campaign = s.get(Campaign, cid)
        assert campaign is not None and repo.best_trial(campaign) is not None
        publish_trial(s, campaign, repo.best_trial(campaign), period_label="2026Q4",  # type: ignore[arg-type]
                     published_by="t", note=None)
    engine.dispose()
    command.downgrade(alembic_config(url), "0006")
    command.upgrade(alembic_config(url), "head")
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            dep = repo.get_deployment(s, "v3")
            assert repo.spec_of(dep).allow_accuracy_affecting is True  # what old ones did
            pub = repo.publications(s, dep)[0]
            assert config_document(pub)["accuracy_affecting"] is None  # not recorded, not "none"
    finally:
        engine.dispose()
