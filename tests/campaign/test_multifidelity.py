"""Multi-fidelity campaigns on SQLite: screening on the simulator, then a second, "real" backend
for the best configs. No real engine can run in a unit test, so the second backend is a fake
at the executor: it measures on the simulator and reports 1e7 / capacity, a different scale
that ranks the configs the other way round. A result that leaked from one fidelity into the
other's decisions would therefore show. The real vLLM run is in
tests/integration/test_multifidelity.py."""

from __future__ import annotations

from dataclasses import replace

import optuna
import pytest
from optuna.trial import TrialState

from autotune.campaign import multifidelity as mf
from autotune.campaign.confirm import ConfirmPlan
from autotune.campaign.study import CampaignRequest, StudyController
from autotune.domain import optuna_keys as keys
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.records import CapacitySearch, TrialOutcome
from autotune.domain.slo import parse_slo
from autotune.errors import ConfigError
from autotune.measure.executors import InlineExecutor, execute_trial
from autotune.measure.trial_spec import TrialSpec
from autotune.release.publish import publish_campaign
from autotune.search.baselines import BASELINES
from autotune.storage import repo
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign, Trial
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

SMALL = DeploymentSpec(name="llama", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=1,
                       tensor_parallel_size=1, max_model_len=8192)
REAL = "vllm"  # the name the fake stands in for: the controller only passes it through
SCREEN_TRIALS, TOP = 8, 2


def _request(**overrides: object) -> CampaignRequest:
    values: dict[str, object] = dict(
        deployment=SMALL, campaign="mf", slo=parse_slo("ttft_p99<=2s,tpot_p99<=100ms"),
        trace=load_trace(DEMO_TRACE), trace_ref=str(DEMO_TRACE), max_trials=SCREEN_TRIALS,
        seed=3, search=CapacitySearch(max_scale=8, bisect_steps=1), backend=REAL,
        backend_options={"model_path": "/nowhere"},
        screen=mf.Screening(backend="sim", top=TOP, options={}),
        confirm=ConfirmPlan(top=2, repeats=2, base_seed=3))
    values.update(overrides)
    return CampaignRequest(**values)  # type: ignore[arg-type]


class FakeRealExecutor(InlineExecutor):
    """Inline; a spec for REAL is measured on the simulator and its capacity inverted."""

    def __init__(self, interrupt_at_real: int | None = None) -> None:
        super().__init__()
        self.real_specs: list[TrialSpec] = []
        self.sim_specs: list[TrialSpec] = []
        self.interrupt_at_real = interrupt_at_real

    def wait(self) -> list[TrialOutcome]:
        if not self._queue:
            return []
        spec = self._queue.pop(0)
        if spec.backend != REAL:
            assert spec.backend_options == {}, "the simulator got the real backend's options"
            self.sim_specs.append(spec)
            return [execute_trial(spec)]
        assert spec.backend_options == {"model_path": "/nowhere"}
        if self.interrupt_at_real is not None and len(self.real_specs) == self.interrupt_at_real:
            self._queue.insert(0, spec)
            raise KeyboardInterrupt  # the job is killed while a real trial runs
        self.real_specs.append(spec)
        outcome = execute_trial(replace(spec, backend="sim", backend_options={}))
        cap = outcome.capacity_output_tok_s
        return [outcome.model_copy(update={"capacity_output_tok_s": 1e7 / cap if cap else 0.0})]


def _campaign(url: str) -> Campaign:
    engine = open_database(url)
    with session_scope(engine) as s:
        c = s.query(Campaign).one()
        _ = [(t.engine_config, t.fidelity) for t in c.trials], c.deployment.name
        _ = [x.trial.number for x in c.confirmations]
    engine.dispose()
    return c


def _check_finished(url: str) -> tuple[Campaign, dict[int, Trial]]:
    """The screening's budget met, the plan measured once each on REAL, every trial marked."""
    c = _campaign(url)
    assert c.status == "completed" and c.screen_backend == "sim" and c.screen_top == TOP
    rows = {t.number: t for t in c.trials}
    sim = [t for t in rows.values() if t.fidelity == "sim"]
    real = [t for t in rows.values() if t.fidelity == REAL]
    assert sum(t.state != "rejected" and t.repeat_of is None for t in sim) == SCREEN_TRIALS
    assert all(t.gpu_hours == 0 for t in sim), "a simulated trial held no GPU"
    # The plan: both baselines, then the TOP best feasible distinct screened configs.
    key = lambda t: tuple(sorted(t.engine_config.items()))  # noqa: E731
    baselines = {r: next(t for t in sim if t.role == r) for r in BASELINES
                 if any(t.role == r for t in sim)}
    best = sorted((t for t in sim if t.feasible and t.repeat_of is None
                   and key(t) not in {key(b) for b in baselines.values()}),
                  key=lambda t: (-t.capacity_output_tok_s, t.number))
    # Llama's recipe is vLLM's defaults: not a baseline of its own (space.baseline_configs).
    assert set(baselines) == {"vllm-default", "guide-heuristic"}
    distinct = {b.role: b for b in baselines.values() if b.repeat_of is None}
    assert distinct
    wanted = list(dict.fromkeys(key(b) for b in distinct.values()))
    references = len(wanted)
    for t in best:
        if key(t) not in wanted:
            wanted.append(key(t))
    wanted = wanted[:references + TOP]
    assert sorted(map(key, real)) == sorted(wanted) and len(real) == len(wanted)  # once each
    assert sorted(t.role for t in real if t.role in BASELINES) == sorted(distinct)
    study = optuna.load_study(study_name=c.study_name, storage=url)
    by_number = {t.number: t for t in study.trials}
    for t in rows.values():
        ft = by_number[t.number]
        assert ft.user_attrs["fidelity"] == t.fidelity
        if ft.state == TrialState.COMPLETE:
            assert ft.value == t.capacity_output_tok_s
    for t in real:  # each names the screening trial of its config
        assert key(rows[by_number[t.number].user_attrs["screen_of"]]) == key(t)
    assert study.user_attrs[keys.PHASE] == keys.REAL_PHASE
    return c, rows


def test_screening_then_real_measurements_and_a_real_winner(migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    executor = FakeRealExecutor()
    StudyController(engine, migrated_sqlite, _request(), executor, lease_s=0.3).run()
    c, rows = _check_finished(migrated_sqlite)
    real = {n: t for n, t in rows.items() if t.fidelity == REAL}
    # Confirmation ran on REAL only, on the best real configs (by the fake's inverted scale).
    assert c.confirmations and all(x.trial.fidelity == REAL for x in c.confirmations)
    top_real = sorted((t for t in real.values() if t.feasible),
                      key=lambda t: -t.capacity_output_tok_s)[:2]
    # Beside them, each baseline that met the SLO on REAL, unless its config is among them.
    top_configs = [t.engine_config for t in top_real]
    extra = [t for t in real.values() if t.role in BASELINES and t.feasible
             and t.engine_config not in top_configs]
    assert sorted(x.trial.number for x in c.confirmations) == sorted(
        [t.number for t in top_real] + [t.number for t in extra])
    assert len({tuple(x.seeds) for x in c.confirmations}) == 1
    winner = repo.choose_winner(c).trial
    assert winner is not None and winner.fidelity == REAL
    best = repo.best_trial(c)
    assert best is not None and best.number == top_real[0].number
    # Every run after screening went to the real backend: plan, then 2 configs x 2 repeats.
    assert len(executor.real_specs) == len(real) + 4
    assert all(s.backend == REAL for s in executor.real_specs)
    sim_best = max((t for t in rows.values() if t.fidelity == "sim" and t.feasible),
                   key=lambda t: t.capacity_output_tok_s)
    with session_scope(engine) as s:
        campaign = s.query(Campaign).one()
        pub = publish_campaign(s, "mf", deployment="llama", trial_number=None,
                               period_label="2026Q4", published_by="t", note=None)
        assert pub.trial.fidelity == REAL and pub.trial.number == winner.number
        with pytest.raises(ConfigError, match="screened on the sim simulator"):
            publish_campaign(s, "mf", deployment="llama", trial_number=sim_best.number,
                             period_label="2026Q4", published_by="t", note=None)
        assert campaign.gpu_hours > 0
    engine.dispose()


def test_a_job_killed_during_the_real_phase_resumes_it_without_repeats(
        migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    first = FakeRealExecutor(interrupt_at_real=2)  # two real trials done, the third running
    with pytest.raises(KeyboardInterrupt):
        StudyController(engine, migrated_sqlite, _request(), first, lease_s=0.3).run()
    study = optuna.load_study(study_name="llama:mf", storage=migrated_sqlite)
    failed = [t for t in study.trials if t.state == TrialState.FAIL]
    assert len(failed) == 1 and failed[0].user_attrs["fidelity"] == REAL
    retry = study.trials[failed[0].system_attrs[keys.REQUEUED_AS]]
    assert retry.state == TrialState.WAITING and retry.user_attrs["fidelity"] == REAL
    assert retry.user_attrs["screen_of"] == failed[0].user_attrs["screen_of"]
    # Resumed with a bigger deadline-free budget: screening stays closed, nothing re-screened.
    second = FakeRealExecutor()
    StudyController(engine, migrated_sqlite, _request(), second, lease_s=0.3).run()
    assert second.sim_specs == []
    c, rows = _check_finished(migrated_sqlite)
    assert rows[retry.number].fidelity == REAL and rows[retry.number].state == "measured"
    assert failed[0].number not in rows
    assert c.stop_reason == "max_trials"
    engine.dispose()


def test_a_job_killed_during_screening_resumes_screening_then_measures(
        migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)

    class _Killed(FakeRealExecutor):
        def wait(self) -> list[TrialOutcome]:
            if self._queue and len(self.sim_specs) == 3:  # the fourth screening trial runs
                raise KeyboardInterrupt
            return super().wait()

    with pytest.raises(KeyboardInterrupt):
        StudyController(engine, migrated_sqlite, _request(), _Killed(), lease_s=0.3).run()
    assert not mf.screening_closed(optuna.load_study(study_name="llama:mf",
                                                     storage=migrated_sqlite))
    StudyController(engine, migrated_sqlite, _request(), FakeRealExecutor(), lease_s=0.3).run()
    _check_finished(migrated_sqlite)
    engine.dispose()


def test_a_resume_must_keep_the_screening(migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    with pytest.raises(KeyboardInterrupt):
        StudyController(engine, migrated_sqlite, _request(), FakeRealExecutor(0),
                        lease_s=0.3).run()
    with pytest.raises(ConfigError, match="screen_top 2 .asked 3."):
        StudyController(engine, migrated_sqlite,
                        _request(screen=mf.Screening(backend="sim", top=3, options={})),
                        FakeRealExecutor(), lease_s=0.3).run()
    engine.dispose()


# -- the plan ----------------------------------------------------------------------------------
def _t(number: int, cap: float, config: dict[str, int], role: str = "proposed",
       state: str = "measured", feasible: bool = True, repeat_of: int | None = None
       ) -> mf.Screened:
    return mf.Screened(number, role, state, feasible, cap, config, repeat_of)


def test_the_plan_takes_references_then_the_best_distinct_others() -> None:
    screened = [
        _t(0, 50, {"max_num_seqs": 256}, role="vllm-default"),
        _t(1, 0, {"max_num_seqs": 64}, role="guide-heuristic", feasible=False),  # missed the SLO
        _t(2, 90, {"max_num_seqs": 128}),
        _t(3, 90, {"max_num_seqs": 128}, repeat_of=2),  # the same config again
        _t(4, 80, {"max_num_seqs": 256}),  # the default's config: measured as the default
        _t(5, 70, {"max_num_seqs": 96}),
        _t(6, 99, {"max_num_seqs": 32}, state="measured", feasible=False),
        _t(7, 0, {"max_num_seqs": 8}, state="rejected", feasible=False),
        _t(8, 60, {"max_num_seqs": 48}),
    ]
    refs = [("vllm-default", "vllm-default"), ("guide-heuristic", "guide-heuristic")]
    runs = mf.plan(screened, 2, refs)
    assert [(r.tag, r.role, r.config["max_num_seqs"], r.screen_of) for r in runs] == [
        ("real:vllm-default", "vllm-default", 256, 0),
        ("real:guide-heuristic", "guide-heuristic", 64, 1),  # the real comparison point
        ("real:screen2", "proposed", 128, 2),
        ("real:screen5", "proposed", 96, 5),
    ]
    # Fewer feasible configs than asked: all of them, and no padding.
    assert [r.screen_of for r in mf.plan(screened, 10, refs)] == [0, 1, 2, 5, 8]
    # A reference the screening rejected (an error rule) cannot run anywhere.
    rejected = [_t(0, 0, {"max_num_seqs": 1}, role="vllm-default", state="rejected",
                   feasible=False), *screened[2:]]
    assert [r.role for r in mf.plan(rejected, 1, refs)] == ["proposed"]
