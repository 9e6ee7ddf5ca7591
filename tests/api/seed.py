"""A small database for API tests, written through the real repository functions (no tuning
run): the demo deployment, one completed campaign with three trials (two feasible, one failed)
and a publication of its best trial."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.domain.deployment import DEMO
from autotune.release.publish import publish_trial
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope, upgrade
from autotune.storage.models import Campaign

CAPACITIES_OUTPUT_TOK_S = (1200.0, 1800.0, 0.0)


@dataclass(frozen=True)
class Seeded:
    url: str
    deployment: str
    campaign: str
    campaign_id: int
    published_trial: int
    trials: int


def seed_database(url: str, *, publish: bool = True) -> Seeded:
    upgrade(url)
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            dep = repo.ensure_deployment(s, DEMO)
            when = repo.now()
            campaign = Campaign(
                deployment_id=dep.id, name="2026Q4", slo={"ttft_p99_ms": 2000.0},
                trace_ref="demo_chat.jsonl", trace_digest="0123456789abcdef", backend="sim",
                executor="inline", search_space="default", study_name="demo:2026Q4",
                max_trials=3, seed=0, status="completed", started_at=when, finished_at=when,
                wall_s=12.5)
            s.add(campaign)
            s.flush()
            for number, capacity in enumerate(CAPACITIES_OUTPUT_TOK_S):
                failed = capacity == 0.0
                repo.add_trial(
                    s, campaign, number=number, role="vllm-default" if number == 0 else "proposed",
                    engine_config={"max_num_seqs": 128 * (number + 1),
                                   "max_num_batched_tokens": 8192},
                    state="failed" if failed else "measured", feasible=not failed,
                    capacity_output_tok_s=capacity, capacity_rate_scale=0.0 if failed else 4.0,
                    latency=None if failed else {"ttft_p99_ms": 900.0, "tpot_p99_ms": 30.0},
                    latency_recorded_rate=None, constraints={"ttft_p99": 1.0 if failed else -0.5},
                    replays=[], failure_class="engine_crash" if failed else None,
                    failure_message="seeded failure" if failed else None, start_s=1.0,
                    measure_s=2.0, started_at=when, worker={}, telemetry={})
            s.refresh(campaign)
            best = repo.best_trial(campaign)
            assert best is not None
            if publish:
                publish_trial(s, campaign, best, period_label="2026Q4", published_by="seed",
                             note="seeded")
            return Seeded(url=url, deployment=dep.name, campaign=campaign.name,
                          campaign_id=campaign.id, published_trial=best.number,
                          trials=len(CAPACITIES_OUTPUT_TOK_S))
    finally:
        engine.dispose()
