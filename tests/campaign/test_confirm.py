"""Winner confirmation: the top configs re-run with other seeds through the executor, the winner
chosen by its lower confidence bound, the noise stored, and `publish` taking that winner."""

from __future__ import annotations

import math

import pytest

from autotune.campaign.confirm import Candidate, ConfirmPlan, TrialRow, candidates, stats, t90
from autotune.campaign.study import CampaignRequest, StudyController
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.records import CapacitySearch, TrialOutcome
from autotune.domain.slo import parse_slo
from autotune.measure.executors import InlineExecutor, execute_trial
from autotune.search.baselines import BASELINES
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

SMALL = DeploymentSpec(name="llama", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=1,
                       tensor_parallel_size=1, max_model_len=8192)
# The best single measurement's config, re-run: one lucky run, one bad one (its mean stays
# near the search value, its spread is wide).
LUCKY = (1.25, 0.55, 1.05)


def _key(config: object) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(config.explicit().items()))  # type: ignore[attr-defined]


class _NoisyBest(InlineExecutor):
    """Inline trials on the simulator; confirmation runs of the config with the best search
    capacity get the LUCKY factors, the others are the simulator's own (seeded jitter)."""

    def __init__(self) -> None:
        super().__init__()
        self.search: dict[tuple[tuple[str, object], ...], float] = {}
        self.confirm_runs: list[tuple[tuple[tuple[str, object], ...], int]] = []

    def wait(self) -> list[TrialOutcome]:
        spec = self._queue.pop(0)
        outcome = execute_trial(spec)
        key = _key(spec.config)
        if not spec.study_name.endswith(":confirm"):
            self.search[key] = max(self.search.get(key, 0.0), outcome.capacity_output_tok_s)
            return [outcome]
        self.confirm_runs.append((key, spec.seed))
        best = max(self.search, key=self.search.__getitem__)
        if key == best:
            run = sum(1 for k, _ in self.confirm_runs if k == key) - 1
            outcome = outcome.model_copy(update={
                "capacity_output_tok_s": self.search[key] * LUCKY[run]})
        return [outcome]


def _request(**overrides: object) -> CampaignRequest:
    values: dict[str, object] = dict(
        deployment=SMALL, campaign="conf", slo=parse_slo("ttft_p99<=2s,tpot_p99<=100ms"),
        trace=load_trace(DEMO_TRACE), trace_ref=str(DEMO_TRACE), max_trials=6, seed=3,
        search=CapacitySearch(max_scale=16, bisect_steps=1), confirm=ConfirmPlan(3, 3, 3))
    values.update(overrides)
    return CampaignRequest(**values)  # type: ignore[arg-type]


def test_the_bound_is_mean_minus_t_s_over_root_n() -> None:
    s = stats([10.0, 12.0, 14.0])
    assert (s.n, s.mean, s.std) == (3, 12.0, pytest.approx(2.0))
    assert s.lcb == pytest.approx(12.0 - 1.8856 * 2.0 / math.sqrt(3), rel=1e-4)
    assert s.cv == pytest.approx(2.0 / 12.0)
    assert stats([5.0]).lcb == 0.0 and stats([]).n == 0  # no spread known: no bound
    # Student's t quantiles (the tables' values), falling towards the normal's 1.2816.
    assert [round(t90(df), 3) for df in (1, 2, 4, 10, 30)] == [3.078, 1.886, 1.533, 1.372, 1.310]
    assert t90(1000) == pytest.approx(1.2816, abs=1e-3)


def test_candidates_are_distinct_feasible_configs_plus_the_incumbent() -> None:
    rows = [TrialRow(0, "vllm-default", "measured", True, 50.0, {"a": 1}),
            TrialRow(1, "proposed", "measured", True, 90.0, {"a": 2}),
            TrialRow(2, "proposed", "measured", True, 90.0, {"a": 2}, repeat_of=1),
            TrialRow(3, "proposed", "measured", False, 0.0, {"a": 3}),
            TrialRow(4, "proposed", "rejected", False, 0.0, {"a": 4}),
            TrialRow(5, "incumbent", "measured", True, 10.0, {"a": 5}),
            TrialRow(6, "proposed", "measured", True, 70.0, {"a": 6})]
    picked = candidates(rows, 2)
    assert [c.trial_number for c in picked] == [1, 6, 5]
    assert all(isinstance(c, Candidate) for c in picked)
    assert candidates(rows, 0) == []


def test_confirmation_picks_by_lcb_stores_the_noise_and_publish_takes_it(
        migrated_sqlite: str) -> None:
    from autotune.release.publish import publish_campaign

    engine = open_database(migrated_sqlite)
    workers = _NoisyBest()
    campaign_id = StudyController(engine, migrated_sqlite, _request(), workers).run()
    with session_scope(engine) as s:
        c = s.get(Campaign, campaign_id)
        assert c is not None and c.status == "completed" and c.stop_reason == "max_trials"
        best_single = repo.best_trial(c)
        assert best_single is not None
        rows = {row.trial.number: row for row in c.confirmations}
        # The top three distinct configs, and each baseline that met the SLO in the search:
        # confirmed with the same seeds as the finalists, so gains over them are like for like.
        top = sorted((t for t in c.trials if t.feasible and t.repeat_of is None),
                     key=lambda t: (-t.capacity_output_tok_s, t.number))
        picked: list[dict[str, object]] = []
        for t in top:
            if len(picked) < 3 and t.engine_config not in picked:
                picked.append(t.engine_config)
        baselines = [t for t in c.trials if t.role in BASELINES]
        assert baselines and any(t.feasible for t in baselines)
        for t in baselines:
            if t.feasible and t.engine_config not in picked:
                picked.append(t.engine_config)
        assert sorted(map(str, (r.engine_config for r in rows.values()))) == sorted(map(str, picked))
        assert best_single.number in rows
        for t in baselines:
            conf = repo.confirmation_of(c, t.engine_config)
            assert (conf is not None) == t.feasible, (t.role, t.state, t.feasible)
        for row in rows.values():
            assert row.n == 3 and len(row.samples) == 3 and row.seeds == [4, 5, 6]  # not seed 3
            assert row.lcb_output_tok_s == pytest.approx(
                row.mean_output_tok_s - t90(2) * row.std_output_tok_s / math.sqrt(3))
            assert row.gpu_hours > 0
        lucky = rows[best_single.number]
        assert lucky.samples == pytest.approx([best_single.capacity_output_tok_s * f for f in LUCKY])
        assert max(lucky.samples) == max(x for r in rows.values() for x in r.samples)
        winner = repo.choose_winner(c).confirmation
        assert winner is not None and winner.trial.number != best_single.number
        assert winner.lcb_output_tok_s == max(r.lcb_output_tok_s for r in rows.values())
        # The simulator's seeded jitter: the same config measures differently under other seeds.
        assert any(r.std_output_tok_s > 0 for n, r in rows.items() if n != best_single.number)
        assert all(r.cv is not None for r in rows.values())
        # GPU time: each trial's, and the campaign's (trials plus confirmation runs).
        spent = sum(t.gpu_hours for t in c.trials) + sum(r.gpu_hours for r in rows.values())
        assert c.gpu_hours == pytest.approx(spent) and spent > 0
        pub = publish_campaign(s, "conf", deployment="llama", trial_number=None,
                               period_label=None, published_by="test", note=None)
        assert pub.trial.number == winner.trial.number
    # Every confirmed config x 3 seeds, through the same executor as the trials.
    assert len(workers.confirm_runs) == 3 * len(rows)
    assert len({k for k, _ in workers.confirm_runs}) == len(rows)
    engine.dispose()


def test_without_confirmation_publish_takes_the_best_single_measurement(
        migrated_sqlite: str) -> None:
    from autotune.release.publish import publish_campaign

    engine = open_database(migrated_sqlite)
    campaign_id = StudyController(engine, migrated_sqlite, _request(confirm=None, max_trials=4),
                                  InlineExecutor()).run()
    with session_scope(engine) as s:
        c = s.get(Campaign, campaign_id)
        assert c is not None and c.confirmations == []
        best = repo.best_trial(c)
        pub = publish_campaign(s, "conf", deployment="llama", trial_number=None,
                               period_label=None, published_by="test", note=None)
        assert best is not None and pub.trial.number == best.number
    engine.dispose()
