"""A real (simulated) database for the report tests: two campaigns of the demo deployment run
by the real study controller. The first, 2026Q3 (3 trials), is published, so it is the
incumbent the second, 2026Q4 (8 trials), is reported against."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

# A trial message can hold anything; one rejected trial's is replaced by this to prove escaping.
HOSTILE_MESSAGE = '<script id="injected">alert("x")</script> & <b>bold</b>'


@dataclass(frozen=True)
class ReportDb:
    url: str
    deployment: str
    campaign: str  # the 8-trial one
    campaign_id: int
    small_campaign: str  # the 3-trial, published one
    hostile_trial: int
    rejected_trials: tuple[int, ...] = ()  # the 8-trial one's, rejected by a rule


def run_campaign(url: str, campaign: str, trials: int) -> int:
    from autotune.campaign.study import CampaignRequest, StudyController
    from autotune.domain.deployment import DEMO
    from autotune.domain.slo import parse_slo
    from autotune.measure.executors import InlineExecutor
    from autotune.storage.db import open_database
    from autotune.traffic.formats import load_trace
    from autotune.traffic.trace import DEMO_TRACE

    engine = open_database(url)
    try:
        request = CampaignRequest(deployment=DEMO, campaign=campaign,
                                  slo=parse_slo("ttft_p99<=2s,tpot_p99<=50ms"),
                                  trace=load_trace(DEMO_TRACE), trace_ref=str(DEMO_TRACE),
                                  max_trials=trials, seed=0,
                                  # Random draws, not TPE's line sweep from vLLM's defaults: the
                                  # report must show infeasible and rule-breaking trials, and the
                                  # sweep's first moves are all feasible neighbours of a good config.
                                  sampler="random")
        return StudyController(engine, url, request, InlineExecutor()).run()
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def report_db(tmp_path_factory: pytest.TempPathFactory) -> ReportDb:
    from autotune.release.publish import publish_trial
    from autotune.storage import repo
    from autotune.storage.db import open_database, session_scope, upgrade
    from autotune.storage.models import Campaign

    url = f"sqlite:///{Path(tmp_path_factory.mktemp('report')) / 'autotune.db'}"
    upgrade(url)
    small_id = run_campaign(url, "2026Q3", 3)
    campaign_id = run_campaign(url, "2026Q4", 8)
    engine = open_database(url)
    try:
        with session_scope(engine) as s:
            small = s.get(Campaign, small_id)
            assert small is not None
            best = repo.best_trial(small)
            assert best is not None, "the 3-trial campaign found no feasible config"
            publish_trial(s, small, best, period_label="2026Q3", published_by="test", note=None)
            big = s.get(Campaign, campaign_id)
            assert big is not None
            rejected = [t for t in big.trials if t.state == "rejected"]
            rejected_numbers = tuple(t.number for t in rejected)
            target = rejected[0] if rejected else big.trials[-1]
            target.failure_message = HOSTILE_MESSAGE
            hostile = target.number
    finally:
        engine.dispose()
    return ReportDb(url=url, deployment="demo", campaign="2026Q4", campaign_id=campaign_id,
                    small_campaign="2026Q3", hostile_trial=hostile,
                    rejected_trials=rejected_numbers)
