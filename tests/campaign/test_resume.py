"""Resume, piece by piece, on SQLite: the lease, and the states a dead job can leave behind.
The real kills (SIGKILL of `autotune tune`) are in tests/integration/test_resume.py."""

from __future__ import annotations

import time

import optuna
import pytest
from optuna.trial import TrialState

from autotune.campaign.claim import claim_campaign
from autotune.campaign.study import CampaignRequest, StudyController, TrialRecord, repair
from autotune.domain import optuna_keys as keys
from autotune.domain.deployment import DeploymentSpec
from autotune.domain.records import TrialOutcome
from autotune.domain.slo import parse_slo
from autotune.errors import ConfigError, StorageError
from autotune.measure.executors import InlineExecutor
from autotune.storage.db import open_database, session_scope
from autotune.storage.models import Campaign
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE
from tests.campaign_checks import check_complete

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

SMALL = DeploymentSpec(name="llama", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=1,
                       tensor_parallel_size=1, max_model_len=8192)


def _request(**overrides: object) -> CampaignRequest:
    from autotune.domain.records import CapacitySearch

    values: dict[str, object] = dict(
        deployment=SMALL, campaign="r", slo=parse_slo("ttft_p99<=2s,tpot_p99<=100ms"),
        trace=load_trace(DEMO_TRACE), trace_ref=str(DEMO_TRACE), max_trials=5, seed=3,
        search=CapacitySearch(max_scale=8, bisect_steps=0))
    values.update(overrides)
    return CampaignRequest(**values)  # type: ignore[arg-type]


# -- the lease ---------------------------------------------------------------------------------
def test_a_live_job_keeps_its_campaign(migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    first = claim_campaign(engine, _request(), lease_s=0.6)
    first.lease.start()
    try:
        with pytest.raises(ConfigError, match="being run by another live job"):
            claim_campaign(engine, _request(), lease_s=0.6)
        assert not first.lease.lost
    finally:
        first.lease.finish("failed", "test", 0.0)
    engine.dispose()


def test_a_silent_jobs_campaign_is_taken_over_and_the_old_job_can_write_no_more(
        migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    dead = claim_campaign(engine, _request(), lease_s=0.6)  # never renews: it "died"
    t0 = time.monotonic()
    second = claim_campaign(engine, _request(), lease_s=0.6)
    assert time.monotonic() - t0 >= 0.6  # it watched one whole lease period first
    assert second.campaign_id == dead.campaign_id and not second.created
    assert not dead.lease.renew()
    with pytest.raises(StorageError, match="taken over by another job"):
        dead.lease.check()
    dead.lease.finish("failed", "late", 1.0)  # must not touch what the new owner holds
    with session_scope(engine) as s:
        c = s.get(Campaign, second.campaign_id)
        assert c is not None
        assert c.status == "running" and c.lease_owner == second.lease.owner
    second.lease.finish("completed", None, 1.0)
    with session_scope(engine) as s:
        c = s.get(Campaign, second.campaign_id)
        assert c is not None and c.status == "completed" and c.lease_owner is None
    engine.dispose()


def test_a_resume_with_other_settings_is_refused(migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    claim_campaign(engine, _request(), lease_s=0.2)
    with pytest.raises(ConfigError, match="max_trials 5 \\(asked 9\\).*same settings"):
        claim_campaign(engine, _request(max_trials=9), lease_s=0.2)
    engine.dispose()


# -- what a dead job leaves ---------------------------------------------------------------------
class _DiesAfterStoring(StudyController):
    """Stops like a killed job right after the row of trial `at` is written, before the tell."""

    def __init__(self, *args: object, at: int, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.at = at

    def _tell(self, study: optuna.Study, trial: optuna.trial.Trial, record: TrialRecord) -> None:
        if trial.number == self.at:
            raise SystemExit("killed")
        super()._tell(study, trial, record)


def test_a_trial_stored_but_not_told_is_told_on_resume(migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    with pytest.raises(SystemExit):
        _DiesAfterStoring(engine, migrated_sqlite, _request(), InlineExecutor(), at=2,
                          lease_s=0.3).run()
    study = optuna.load_study(study_name="llama:r", storage=migrated_sqlite)
    assert study.trials[2].state == TrialState.RUNNING  # the state a kill leaves
    StudyController(engine, migrated_sqlite, _request(), InlineExecutor(), lease_s=0.3).run()
    rows, trials = check_complete(migrated_sqlite, "llama", "r", 5)
    assert trials[2].state == TrialState.COMPLETE and 2 in rows  # told, not run again
    assert not any(t.user_attrs.get("retry_of") == 2 for t in trials)
    engine.dispose()


def test_a_resume_with_another_sampler_continues_with_it(
        migrated_sqlite: str, caplog: pytest.LogCaptureFixture) -> None:
    engine = open_database(migrated_sqlite)
    with pytest.raises(SystemExit):
        _DiesAfterStoring(engine, migrated_sqlite, _request(sampler="random"), InlineExecutor(),
                          at=2, lease_s=0.3).run()
    with caplog.at_level("WARNING", "autotune.study"):
        StudyController(engine, migrated_sqlite, _request(sampler="tpe"), InlineExecutor(),
                        lease_s=0.3).run()
    check_complete(migrated_sqlite, "llama", "r", 5)
    # A library's log names the setting; `autotune tune` warns with the flag.
    [line] = [r.getMessage() for r in caplog.records if "proposed by" in r.getMessage()]
    assert line == ("llama:r: campaign 'r' was started with sampler random; its remaining "
                    "trials are proposed by sampler tpe")
    study = optuna.load_study(study_name="llama:r", storage=migrated_sqlite)
    assert study.user_attrs[keys.SAMPLER] == "tpe"  # what proposes now
    engine.dispose()


class _InterruptedAt(InlineExecutor):
    """Ctrl-C while the first trial numbered `at` or later runs (rule breakers never do)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at
        self.interrupted: int | None = None

    def wait(self) -> list[TrialOutcome]:
        if self._queue and self._queue[0].trial_number >= self.at:
            self.interrupted = self._queue[0].trial_number
            raise KeyboardInterrupt
        return super().wait()


def test_an_interrupted_job_requeues_its_trial_and_the_next_one_finishes(
        migrated_sqlite: str) -> None:
    engine = open_database(migrated_sqlite)
    executor = _InterruptedAt(3)
    with pytest.raises(KeyboardInterrupt):
        StudyController(engine, migrated_sqlite, _request(), executor, lease_s=0.3).run()
    with session_scope(engine) as s:
        c = s.query(Campaign).one()
        assert c.status == "failed" and c.lease_owner is None
    study = optuna.load_study(study_name="llama:r", storage=migrated_sqlite)
    assert executor.interrupted is not None
    cut = study.trials[executor.interrupted]
    assert cut.state == TrialState.FAIL
    waiting = study.trials[cut.system_attrs[keys.REQUEUED_AS]]
    assert waiting.state == TrialState.WAITING
    assert waiting.system_attrs["fixed_params"] == cut.params
    StudyController(engine, migrated_sqlite, _request(), InlineExecutor(), lease_s=0.3).run()
    rows, _ = check_complete(migrated_sqlite, "llama", "r", 5)
    assert rows[waiting.number].engine_config.items() >= cut.params.items()
    engine.dispose()


def test_an_interrupted_requeue_is_finished_not_repeated(migrated_sqlite: str) -> None:
    storage = optuna.storages.RDBStorage(migrated_sqlite)
    study = optuna.create_study(study_name="s", storage=storage)
    dist = optuna.distributions.IntDistribution(1, 10)
    running = study.ask({"x": dist})
    # The job died after enqueueing the retry but before failing the original.
    template = optuna.trial.create_trial(
        state=TrialState.WAITING, system_attrs={"fixed_params": running.params,
                                                keys.RETRY_OF: running.number})
    storage.create_new_trial(storage.get_study_id_from_name("s"), template_trial=template)
    assert repair.repair(storage, study, {}) == [running.number]
    trials = study.get_trials()
    assert len(trials) == 2  # no second retry
    assert trials[0].state == TrialState.FAIL and trials[0].system_attrs[keys.REQUEUED_AS] == 1
    assert study.ask({"x": dist}).params == running.params  # the retry runs its parameters


def test_baselines_are_enqueued_once_even_after_a_crash_between_them() -> None:
    study = optuna.create_study()
    params = {"vllm-default": {"x": 1}, "guide-heuristic": {"x": 2}}
    study.enqueue_trial({"x": 1}, user_attrs={"role": "vllm-default"})  # then the job died
    repair.ensure_baselines(study, params)
    repair.ensure_baselines(study, params)
    roles = [t.user_attrs["role"] for t in study.trials]
    assert roles == ["vllm-default", "guide-heuristic"]
