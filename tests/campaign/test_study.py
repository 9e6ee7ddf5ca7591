"""A whole campaign, inline, on the simulator and SQLite."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.campaign.study import CampaignRequest, StudyController
from autotune.domain import optuna_keys as keys
from autotune.domain.deployment import DEMO
from autotune.domain.slo import parse_slo
from autotune.measure.executors import InlineExecutor
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope, upgrade
from autotune.storage.models import Campaign
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier
SLO = "ttft_p99<=2s,tpot_p99<=50ms"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    url = f"sqlite:///{tmp_path_factory.mktemp('study') / 'a.db'}"
    upgrade(url)
    request = CampaignRequest(deployment=DEMO, campaign="c1", slo=parse_slo(SLO),
                              trace=load_trace(DEMO_TRACE), trace_ref=str(DEMO_TRACE),
                              # Random proposals: some break the rules within 12 trials, which
                              # the default sampler's line sweep (valid steps) rarely does.
                              sampler="random", max_trials=12, seed=1)
    engine = open_database(url)
    campaign_id = StudyController(engine, url, request, InlineExecutor()).run()
    engine.dispose()
    return url, campaign_id


def _campaign(url: str, campaign_id: int) -> Campaign:
    engine = open_database(url)
    with session_scope(engine) as s:
        c = s.get(Campaign, campaign_id)
        assert c is not None
        _ = [t.engine_config for t in c.trials], c.deployment.name
    engine.dispose()
    return c


def test_baselines_run_first_and_the_budget_is_kept(finished: tuple[str, int]) -> None:
    c = _campaign(*finished)
    assert c.status == "completed" and c.finished_at is not None
    roles = {t.number: t.role for t in c.trials}
    assert roles[0] == "vllm-default" and roles[1] == "guide-heuristic"
    assert sum(t.state != "rejected" for t in c.trials) == 12
    heuristic = next(t for t in c.trials if t.role == "guide-heuristic")
    # The guide's block 32 gives way to the 256 DeepSeek-V4's kernels need (a pin).
    assert heuristic.engine_config["block_size"] == 256 and heuristic.engine_config["max_num_seqs"] == 64


def test_rule_breakers_never_reach_an_engine(finished: tuple[str, int]) -> None:
    c = _campaign(*finished)
    rejected = [t for t in c.trials if t.state == "rejected"]
    assert rejected, "the fixture campaign should hold a rule-rejected trial"
    for t in rejected:
        assert t.failure_class == "rule_violation" and not t.feasible
        assert t.replays == [] and t.worker == {}  # no engine was started
        assert t.constraints["interaction_rules"] >= 1


def test_best_trial_is_feasible_and_constraints_reach_optuna(finished: tuple[str, int]) -> None:
    url, campaign_id = finished
    c = _campaign(url, campaign_id)
    best = repo.best_trial(c)
    assert best is not None and best.feasible and best.capacity_output_tok_s > 0
    assert all(v <= 0 for v in best.constraints.values())
    study = optuna.load_study(study_name=c.study_name, storage=url)
    assert study.best_trial.number == best.number
    frozen = {t.number: t for t in study.trials}
    for t in c.trials:
        ft = frozen[t.number]
        assert ft.state == optuna.trial.TrialState.COMPLETE
        named = {k: v for k, v in ft.constraints.items() if not k.isdigit()}
        assert named == pytest.approx(t.constraints)
        # The list form optuna-dashboard 0.21 reads.
        assert ft.system_attrs["constraints"] == pytest.approx(list(t.constraints.values()))
        assert ft.user_attrs["role"] == t.role
        # What optuna-dashboard's trial page shows (it lists user attributes, not constraints).
        assert ft.user_attrs["feasible"] is t.feasible
        assert ft.user_attrs["failure_class"] == (t.failure_class or "none")
        assert {k.removeprefix("constraint:"): v for k, v in ft.user_attrs.items()
                if k.startswith("constraint:")} == pytest.approx(t.constraints)
        if t.feasible:  # what the line sweep reads of the replay at capacity
            peak = max(r["max_concurrent_requests"] for r in t.replays if r.get("at_capacity"))
            assert ft.user_attrs[keys.PEAK_IN_FLIGHT] == peak
            use = ft.user_attrs[keys.SLO_USE]
            assert use == {k: pytest.approx(t.latency[k] / limit, abs=1e-4)
                           for k, limit in parse_slo(SLO).to_dict().items()}


def test_measured_trials_carry_latency_and_where_they_ran(finished: tuple[str, int]) -> None:
    c = _campaign(*finished)
    measured = [t for t in c.trials if t.state == "measured"]
    assert measured and any(t.feasible for t in measured)
    for t in measured:
        assert t.latency_recorded_rate is not None and t.replays
        assert t.worker.get("pid") and t.started_at is not None
        if t.feasible:
            assert t.capacity_rate_scale >= 1.0
            assert t.latency["ttft_p99_ms"] <= 2000 and t.latency["tpot_p99_ms"] <= 50


def test_repeated_configs_reuse_the_measurement(tmp_path: Path) -> None:
    """A space of two configs: the sampler cannot help proposing measured ones again."""
    space = tmp_path / "two.yaml"
    space.write_text("name: two\nparameters:\n"
                     "  max_num_seqs: {type: categorical, choices: [64, 1024]}\n")
    url = f"sqlite:///{tmp_path / 'r.db'}"
    upgrade(url)
    request = CampaignRequest(deployment=DEMO, campaign="r", slo=parse_slo("ttft_p99<=2s"),
                              trace=load_trace(DEMO_TRACE).slice(0, 200), trace_ref="demo",
                              search_space=str(space), max_trials=6, seed=1)
    engine = open_database(url)
    c = _campaign(url, StudyController(engine, url, request, InlineExecutor()).run())
    engine.dispose()
    by_number = {t.number: t for t in c.trials}
    repeats = [t for t in c.trials if t.repeat_of is not None]
    assert repeats, "two configs, several proposals: some must repeat"
    for t in repeats:
        first = by_number[t.repeat_of]
        assert first.repeat_of is None and first.replays  # the first one ran an engine
        assert t.engine_config == first.engine_config
        assert t.capacity_output_tok_s == first.capacity_output_tok_s
        assert t.gpu_hours == 0  # ... the repeat none


def _request(url: str, **overrides: object) -> CampaignRequest:
    values: dict[str, object] = dict(
        deployment=DEMO, campaign="c2", slo=parse_slo("ttft_p99<=2s"),
        trace=load_trace(DEMO_TRACE), trace_ref=str(DEMO_TRACE), max_trials=6, seed=2)
    values.update(overrides)
    return CampaignRequest(**values)  # type: ignore[arg-type]


def test_a_campaign_whose_baselines_cannot_start_stops(migrated_sqlite: str) -> None:
    from autotune.domain.deployment import DeploymentSpec
    from autotune.errors import ConfigError

    # 671B parameters on one 45 GiB GPU: every engine fails to start, whatever its arguments.
    hopeless = DeploymentSpec(name="big", model="DeepSeek-V3", gpu="L40S", gpu_count=1,
                              tensor_parallel_size=1, max_model_len=8192)
    engine = open_database(migrated_sqlite)
    controller = StudyController(engine, migrated_sqlite, _request(migrated_sqlite, deployment=hopeless),
                                 InlineExecutor())
    with pytest.raises(ConfigError, match="every baseline failed to start.*oom"):
        controller.run()
    with session_scope(engine) as s:
        c = s.scalars(__import__("sqlalchemy").select(Campaign)).one()
        assert c.status == "failed" and "every baseline failed" in (c.message or "")
        assert len(c.trials) == 2  # the budget was not burnt
    engine.dispose()


class _FlakyWorkers(InlineExecutor):
    """Inline trials, except that a worker is lost on the first attempt of some trials."""

    def __init__(self, lose: set[int], always: bool = False) -> None:
        super().__init__()
        self.lose, self.always, self.attempts = lose, always, []  # type: ignore[var-annotated]

    def wait(self):  # type: ignore[no-untyped-def]
        spec = self._queue.pop(0)
        self.attempts.append(spec.trial_number)
        first = self.attempts.count(spec.trial_number) == 1
        if spec.trial_number in self.lose and (first or self.always):
            from autotune.domain.records import TrialOutcome

            return [TrialOutcome(trial_number=spec.trial_number, capacity_output_tok_s=0.0,
                                 capacity_rate_scale=0.0, at_capacity=None, at_recorded_rate=None,
                                 failure_class="infrastructure", failure_message="worker lost")]
        from autotune.measure.executors import execute_trial

        return [execute_trial(spec)]


def test_a_lost_worker_is_retried_once_and_the_trial_counts_once(migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    workers = _FlakyWorkers(lose={0, 1})  # the baselines always reach a worker
    campaign_id = StudyController(engine, migrated_sqlite, _request(migrated_sqlite), workers).run()
    with session_scope(engine) as s:
        c = s.get(Campaign, campaign_id)
        assert c is not None and c.status == "completed"
        numbers = [t.number for t in c.trials]
        assert len(numbers) == len(set(numbers))
        by_number = {t.number: t for t in c.trials}
        assert by_number[0].state == "measured" and by_number[0].failure_class is None
    assert workers.attempts.count(0) == 2 and workers.attempts.count(1) == 2
    engine.dispose()


def test_repeated_infrastructure_failures_stop_the_campaign(migrated_sqlite: str) -> None:
    from autotune.errors import InfrastructureError

    engine = open_database(migrated_sqlite)
    workers = _FlakyWorkers(lose=set(range(100)), always=True)
    with pytest.raises(InfrastructureError, match="3 trials in a row failed in the workers"):
        StudyController(engine, migrated_sqlite, _request(migrated_sqlite), workers).run()
    engine.dispose()


class _GpuEngineStandIn(InlineExecutor):
    """Where a GPU engine would serve the trial: the simulator, with drafting left out (it has
    no model of it). What is checked is the controller's handling of nested configs."""

    def __init__(self) -> None:
        super().__init__()
        self.drafting: list[dict[str, object]] = []

    def wait(self):  # type: ignore[no-untyped-def]
        import dataclasses

        from autotune.measure.executors import execute_trial

        spec = self._queue.pop(0)
        if spec.config.speculative_config is not None:
            self.drafting.append(spec.config.explicit()["speculative_config"])
        plain = spec.config.model_copy(update={"speculative_config": None})
        return [execute_trial(dataclasses.replace(spec, config=plain, backend="sim"))]


def test_a_campaign_searches_speculative_decoding_on_real_engines(migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    workers = _GpuEngineStandIn()
    # Random proposals draft in most trials; the line sweep reaches the drafting axis late.
    request = _request(migrated_sqlite, backend="vllm", search_space="chat-speculative",
                       sampler="random", max_trials=14, seed=3)
    campaign_id = StudyController(engine, migrated_sqlite, request, workers).run()
    with session_scope(engine) as s:
        c = s.get(Campaign, campaign_id)
        assert c is not None and c.status == "completed"
        stored = [t.engine_config.get("speculative_config") for t in c.trials
                  if t.state == "measured"]
    engine.dispose()
    # Proposals draft with MTP, stored as vLLM's nested config, and reached the engines so.
    drafted = [d for d in stored if d is not None]
    assert drafted and all(d["method"] == "mtp" for d in drafted)
    assert workers.drafting and all(d in drafted for d in workers.drafting)
