"""The search loop: Optuna ask/tell around an executor, at most `slots` trials in flight.

A config that breaks an interaction rule is told as infeasible without starting an engine; a
config the sampler repeats reuses its measurement. Each outcome is written by the recorder
(autotune.campaign.study.recorder) and then told. The search stops at max_trials, or when the budget
(GPU-hours, deadline) is spent; a multi-fidelity campaign then measures its best screened
configs on the real backend (autotune.campaign.study.phases), and the confirmation follows
(autotune.campaign.study.confirmation)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import Trial as OptunaTrial
from sqlalchemy import Engine

from autotune.campaign import budget as budgets
from autotune.campaign import multifidelity as mf
from autotune.campaign.claim import Claim, claim_campaign
from autotune.campaign.study import confirmation, phases, repair
from autotune.campaign.study.observer import Observer
from autotune.campaign.study.recorder import TrialRecorder
from autotune.campaign.study.request import CampaignRequest
from autotune.domain import optuna_keys as keys
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import TrialOutcome
from autotune.domain.trial_record import TrialRecord
from autotune.domain.vllm_defaults import deployment_args
from autotune.errors import ConfigError, InfrastructureError, SettingError
from autotune.measure import progress
from autotune.measure.executors import Executor
from autotune.measure.trial_spec import TrialSpec
from autotune.search.baselines import BASELINES, baseline_configs
from autotune.search.samplers import make_sampler
from autotune.search.spaces.deployment import config_for, space_params
from autotune.search.spaces.violations import violations
from autotune.storage import repo, studies
from autotune.storage.db import session_scope
from autotune.storage.lease import Lease
from autotune.storage.models import Campaign
from autotune.storage.trial_rows import outcome_of, stored_trials
from autotune.vocabulary import ENGINE_FAILURES, NOT_THE_CONFIG, RecordState, Role

log = logging.getLogger("autotune.study")
ASKS_PER_TRIAL = 10  # cap on asks (rejections and repeats are free) per measured trial
MAX_INFRA_FAILURES_IN_A_ROW = 3  # then the cluster, not the configs, is what fails


@dataclass
class _InFlight:
    trial: OptunaTrial
    role: str
    config: EngineConfig
    slow_rules: list[str]
    fidelity: str
    repeat_of: int | None = None
    spec: TrialSpec | None = None
    retried: bool = False


class StudyController:
    def __init__(self, engine: Engine, storage_url: str, request: CampaignRequest,
                 executor: Executor, observer: Observer | None = None,
                 clock: Callable[[], float] = time.monotonic, lease_s: float = 30.0) -> None:
        self.engine, self.request, self.executor = engine, request, executor
        self.lease_s = lease_s  # how long a silent job is given before its campaign is taken
        self._lease: Lease | None = None
        self.observer = observer or Observer()
        self.space = phases.search_space(request)
        # The sampler proposes from plan.space (the grid sampler's is two axes of this space).
        self.plan = make_sampler(request.sampler, self.space, seed=request.seed,
                                 parallel=request.parallel)
        self.storage = studies.open_storage(storage_url)
        self.clock = clock
        # Checked before anything is written: a baseline the space cannot hold is a bad request.
        self.baselines = baseline_configs(request.deployment)
        self.baseline_params = {role: space_params(self.plan.space, config, request.deployment)
                                for role, config in self.baselines.items()}
        self.reference_params = phases.reference_params(request, self.plan.space)
        self.recorder = TrialRecorder(engine, self.storage, request)
        self.records: list[TrialRecord] = []
        self.stop_reason: str | None = None
        self._infra_in_a_row = 0
        # (fidelity, config key) -> its measurement: a repeat reuses only its own fidelity's.
        self._seen: dict[tuple[str, str], TrialOutcome] = {}
        self._in_flight: dict[int, _InFlight] = {}
        self._phase = request.search_backend  # the fidelity trials are being measured on

    @property
    def gpu_hours(self) -> float:
        """Spent by the search so far (restored on resume)."""
        return self.recorder.gpu_hours

    def _update_campaign(self, campaign_id: int, **values: Any) -> None:
        with session_scope(self.engine) as s:
            row = s.get(Campaign, campaign_id)
            assert row is not None
            for name, value in values.items():
                setattr(row, name, value)

    def _restore(self, study: optuna.Study, campaign_id: int) -> int:
        """Settle what a dead job left and reload what it finished; returns the trials that
        count against the budget so far."""
        rows = stored_trials(self.engine, campaign_id)
        requeued = repair.repair(self.storage, study, rows)
        for row in sorted(rows.values(), key=lambda t: t.number):
            record = repo.trial_record(row)
            self.records.append(record)
            self.observer.on_trial(record)
            self.recorder.gpu_hours += row.gpu_hours
            if row.latency_recorded_rate is not None and row.repeat_of is None:
                self._seen.setdefault((row.fidelity, EngineConfig(**row.engine_config).key()),
                                      outcome_of(row))
        # The budget counts the search's trials (a multi-fidelity campaign's screening ones).
        done = sum(1 for t in rows.values() if t.state != RecordState.REJECTED
                   and t.repeat_of is None and t.fidelity == self.request.search_backend)
        if rows or requeued:
            log.warning("%s: %d of %d trials already done; %d re-queued (%s)",
                        self.request.study_name, done, self.request.max_trials, len(requeued),
                        ", ".join(map(str, requeued)) or "none")
        return done

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> int:
        """Run the campaign to its budget, resuming it if a dead job left it; returns its id."""
        with progress.reporting(self.observer.on_event):  # replay steps of inline trials too
            return self._run()

    def _run(self) -> int:
        r = self.request
        t0 = self.clock()
        claim = self._claim()
        self._lease = self.recorder.lease = lease = claim.lease
        lease.start()
        campaign_id = claim.campaign_id
        # The budget asked this time (a resume may change it).
        self._update_campaign(campaign_id, budget=r.budget.to_dict(r.max_trials),
                              period=r.period)
        status = "failed"
        message: str | None = "interrupted"
        study: optuna.Study | None = None
        try:
            study = phases.open_study(self.storage, r, self.plan, self.reference_params,
                                      self.baseline_params)
            self.observer.on_start(r)
            submitted = self._restore(study, campaign_id)
            with session_scope(self.engine) as s:  # a resumed job keeps the first one's reason
                row = s.get(Campaign, campaign_id)
                assert row is not None
                self.stop_reason = row.stop_reason
            if r.screen is None or not mf.screening_closed(study):
                self._search(study, campaign_id, submitted)
            if r.screen is not None:
                self._measure_real(study, campaign_id)
            confirmation.confirm_and_compare(self.engine, self.executor, study, campaign_id, r,
                                             self.records, self.stop_reason, self._lease)
            status, message = "completed", None
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
            if study is not None and not lease.lost:
                self._requeue_in_flight(study)
            raise
        finally:
            self.executor.close()
            lease.finish(status, message, self.clock() - t0)
        return campaign_id

    def _claim(self) -> Claim:
        """Claim the campaign (refusing a live job's) and open the executor's workers."""
        r = self.request
        claim = claim_campaign(self.engine, r, self.lease_s)
        if claim.created and studies.has_study(self.storage, r.study_name):
            claim.abandon()
            raise SettingError("an Optuna study named {study!r} already exists in this "
                               "database; choose another {campaign} name", study=r.study_name)
        try:
            # Workers before the study: an unreachable cluster leaves a new campaign no trace.
            self.executor.open(r.parallel, r.deployment.tensor_parallel_size)
        except BaseException:
            claim.abandon()
            raise
        return claim

    def _search(self, study: optuna.Study, campaign_id: int, submitted: int) -> None:
        """Ask and measure until max_trials, the asks' cap or the budget; `submitted`: the
        trials a dead job already counted."""
        r = self.request
        asks = len(study.get_trials(deepcopy=False))

        def more() -> bool:
            return (submitted < r.max_trials and asks < r.max_trials * ASKS_PER_TRIAL
                    and not self._budget_spent())

        while True:
            while len(self._in_flight) < self.executor.slots and more():
                asks += 1
                job = self._ask(study, campaign_id)
                if job is not None:
                    self._in_flight[job.trial.number] = job
                    submitted += 1
            if not self._drain(study, campaign_id):
                break
        self.stop_reason = self._budget_spent() or (
            budgets.MAX_TRIALS if submitted >= r.max_trials else "asks")
        # DEBUG: the progress line of the event says it at INFO (once, not twice).
        log.debug("%s: search stopped (%s) after %d trials, %.3g GPU-hours", r.study_name,
                  self.stop_reason, submitted, self.gpu_hours)
        progress.emit(progress.SearchStopped(r.study_name, self.stop_reason, submitted,
                                             self.gpu_hours))
        if r.screen is not None:  # kept for a job that resumes the real phase
            self._update_campaign(campaign_id, stop_reason=self.stop_reason)

    def _drain(self, study: optuna.Study, campaign_id: int) -> bool:
        """Wait for the executor and finish what it returns; False when nothing is in flight."""
        in_flight = self._in_flight
        if not in_flight:
            return False
        for outcome in self.executor.wait():
            job = in_flight[outcome.trial_number]
            if outcome.failure_class == "infrastructure" and not job.retried and job.spec:
                # A lost worker says nothing about the config: run it once more.
                log.warning("%s trial %d: %s; retrying once", self.request.study_name,
                            outcome.trial_number, outcome.failure_message)
                job.retried = True
                self.executor.submit(job.spec)
                continue
            self._finish(study, campaign_id, in_flight.pop(outcome.trial_number), outcome)
            self._check_health(outcome)
        return True

    def _measure_real(self, study: optuna.Study, campaign_id: int) -> None:
        """The real phase of a multi-fidelity campaign: close screening, enqueue its plan (the
        references and the best screened configs) and run it on the real backend."""
        r = self.request
        phases.enqueue_real_phase(self.storage, study, r, self.records, self.reference_params,
                                  list(self.baselines), self.plan.space)
        self._phase = r.backend
        self._infra_in_a_row = 0
        while True:
            while len(self._in_flight) < self.executor.slots and mf.waiting_real(study, r.backend):
                job = self._ask(study, campaign_id)
                if job is not None:
                    self._in_flight[job.trial.number] = job
            if not self._drain(study, campaign_id):
                break

    def _budget_spent(self) -> str | None:
        return self.request.budget.spent(self.gpu_hours, time.time())

    def _requeue_in_flight(self, study: optuna.Study) -> None:
        """Never leave a RUNNING trial behind: a later `tune` runs these parameters again."""
        for number, job in self._in_flight.items():
            try:
                repair.requeue(self.storage, study, self.storage.get_trial(job.trial._trial_id))
            except Exception as exc:  # the database may be what failed; resume repairs it
                log.error("%s trial %d: could not re-queue it (%s); a resume will",
                          self.request.study_name, number, exc)

    def _check_health(self, outcome: TrialOutcome) -> None:
        """Stop instead of burning the budget when the setup, not a config, is what fails."""
        self._infra_in_a_row = (self._infra_in_a_row + 1
                                if outcome.failure_class in NOT_THE_CONFIG else 0)
        if self._infra_in_a_row >= MAX_INFRA_FAILURES_IN_A_ROW:
            raise InfrastructureError(
                f"{self._infra_in_a_row} trials in a row failed in the workers (last: "
                f"{outcome.failure_message}); check the executor and the backend's setup "
                "before tuning again")
        phase = [rec for rec in self.records if rec.fidelity == self._phase]
        baselines = [rec for rec in phase if rec.role in BASELINES]
        if len(baselines) == len(self.baselines) and all(
                rec.failure_class in ENGINE_FAILURES for rec in baselines) and not any(
                rec.role not in BASELINES and rec.state == RecordState.MEASURED for rec in phase):
            first = baselines[0]
            raise ConfigError(f"every baseline failed to start or crashed on {self._phase} "
                              f"({first.failure_class}: "
                              f"{first.failure_message}); the deployment or the engine setup is "
                              "wrong (see the engine logs), not the tuned arguments")

    def _ask(self, study: optuna.Study, campaign_id: int) -> _InFlight | None:
        """Ask for a config; returns it if it must run, else tells it right away."""
        dep = self.request.deployment
        trial = study.ask()
        role = trial.user_attrs.get(keys.ROLE, Role.PROPOSED)
        fidelity = trial.user_attrs.get(keys.FIDELITY, self.request.search_backend)
        if fidelity != self._phase:  # mf.waiting_real and close_screening keep this from happening
            raise ConfigError(f"trial {trial.number} is for {fidelity}, asked while measuring on "
                              f"{self._phase}")
        # A reference runs its exact config; the space's parameters are enqueued equal to it.
        exact = trial.user_attrs.get(keys.ENGINE_CONFIG)
        base = (EngineConfig(**exact) if exact else self.baselines.get(role)
                or EngineConfig(**deployment_args(dep)))
        # Define-by-run: a conditional parameter is suggested only when its feature is on.
        config = config_for(self.space, base, self.plan.space.suggest(trial))
        self.recorder.describe(trial, config, self.space)
        broken = violations(self.space, config, dep)
        # Baselines are references: they run unless they are known to fail.
        blocking = [v for v in broken if role == Role.PROPOSED or v.severity == "error"]
        if blocking:
            record = self.recorder.rejected(campaign_id, trial, role, config, blocking,
                                            self._phase)
            self._tell(study, trial, record)
            return None
        key = (fidelity, config.key())
        if key in self._seen:  # the sampler repeated a config: reuse its measurement
            first = self._seen[key].trial_number
            trial.set_user_attr(keys.REPEAT_OF, first)
            outcome = self._seen[key].model_copy(update={"trial_number": trial.number})
            self._finish(study, campaign_id, _InFlight(trial, role, config, [], fidelity, first),
                         outcome)
            return None
        return self._submit(trial, role, config, fidelity, [v.rule for v in broken])

    def _submit(self, trial: OptunaTrial, role: str, config: EngineConfig, fidelity: str,
                slow_rules: list[str]) -> _InFlight:
        """Start measuring a config on the executor."""
        r = self.request
        spec = TrialSpec(study_name=r.study_name, trial_number=trial.number, config=config,
                         deployment=r.deployment, trace=r.trace, slo=r.slo, backend=fidelity,
                         seed=r.seed, search=r.search, backend_options=r.options_of(fidelity))
        # What the progress line of its start leaves out (that line says it started).
        log.info("%s trial %d (%s, %s): engine arguments %s", spec.study_name, trial.number,
                 role, fidelity, " ".join(config.to_cli_args()))
        self.executor.submit(spec)
        progress.emit(progress.TrialStarted(spec.study_name, trial.number, role, fidelity,
                                            self.gpu_hours))
        return _InFlight(trial, role, config, slow_rules, fidelity, spec=spec)

    def _finish(self, study: optuna.Study, campaign_id: int, job: _InFlight,
                outcome: TrialOutcome) -> None:
        if outcome.at_recorded_rate is not None:
            self._seen.setdefault((job.fidelity, job.config.key()), outcome)
        record = self.recorder.finished(campaign_id, job.trial, outcome, role=job.role,
                                        config=job.config, fidelity=job.fidelity,
                                        slow_rules=job.slow_rules, repeat_of=job.repeat_of)
        self._tell(study, job.trial, record)

    def _tell(self, study: optuna.Study, trial: OptunaTrial, record: TrialRecord) -> None:
        """After the recorder's writes (autotune.campaign.study.recorder says why in this order)."""
        study.tell(trial, record.capacity_output_tok_s)  # 0 when infeasible
        self.records.append(record)
        self.observer.on_trial(record)
