"""The study controller: Optuna ask/tell around an executor, every trial stored as it ends.

References are enqueued first: the incumbent and warm starts (a quarterly campaign's, each
with its exact config), then the baselines (vLLM's defaults and the tuning guide's heuristic).
A config that breaks an interaction rule is told as infeasible without starting an engine.
Measured configs run on the executor, at most `slots` at a time; each outcome is told to Optuna
with its constraint values and written to the project's tables, with the GPU time it cost. The
search stops at max_trials, or when the budget (GPU-hours, deadline) is spent; then the best
configs, the incumbent and the baselines are confirmed (autotune.confirm) on the same executor,
all with the same seeds. A multi-fidelity campaign screens on the simulator first and measures
its best configs for real in between (autotune.multifidelity).

Comparison configs (`CampaignRequest.compare`, e.g. a per-path campaign's single whole-trace
config, autotune.per_path) are then measured with the confirmation's seeds on this campaign's
trace and SLO, outside the search: they need not lie in its space and never win; their results
go to the study's user attribute `autotune:compare` (see `comparisons`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import optuna
from optuna.trial import Trial as OptunaTrial
from sqlalchemy import Engine

from autotune import accuracy, confirm, progress, resume
from autotune import budget as budgets
from autotune import multifidelity as mf
from autotune import optuna_keys as keys
from autotune.baselines import BASELINES, deployment_args, resolved
from autotune.confirm import ConfirmPlan
from autotune.deployment import DeploymentSpec
from autotune.engine_config import EngineConfig
from autotune.errors import ConfigError, InfrastructureError, SearchSpaceError
from autotune.executors import Executor
from autotune.objective import (
    OBJECTIVE_NAME,
    is_feasible,
    outcome_constraints,
    rejected_constraints,
)
from autotune.records import CapacitySearch, TrialOutcome, TrialSpec
from autotune.rules import violations
from autotune.samplers import DEFAULT_SAMPLER, make_sampler
from autotune.slo import SLO
from autotune.space import (
    baseline_configs,
    config_for,
    deployment_space,
    hold_config,
    space_params,
)
from autotune.storage import repo
from autotune.storage.db import session_scope
from autotune.storage.models import Campaign
from autotune.traffic.trace import Trace
from autotune.trial_record import TrialRecord
from autotune.vocabulary import ENGINE_FAILURES, NOT_THE_CONFIG, FailureClass, RecordState, Role

log = logging.getLogger("autotune.study")
ASKS_PER_TRIAL = 10  # cap on asks (rejections and repeats are free) per measured trial
MAX_INFRA_FAILURES_IN_A_ROW = 3  # then the cluster, not the configs, is what fails


@dataclass(frozen=True)
class Reference:
    """A config enqueued before the baselines with its exact arguments: the incumbent, or a
    warm start from an earlier campaign. `tag` names it uniquely within the campaign."""

    tag: str
    role: str
    config: dict[str, Any]  # EngineConfig.explicit()


@dataclass(frozen=True)
class CampaignRequest:
    deployment: DeploymentSpec
    campaign: str
    slo: SLO
    trace: Trace
    trace_ref: str
    backend: str = "sim"
    executor: str = "inline"
    parallel: int = 1
    search_space: str = "default"
    sampler: str = DEFAULT_SAMPLER
    max_trials: int = 30
    seed: int = 0
    search: CapacitySearch = field(default_factory=CapacitySearch)
    backend_options: dict[str, Any] = field(default_factory=dict)
    budget: budgets.Budget = field(default_factory=budgets.Budget)
    confirm: ConfirmPlan | None = None  # None: publish the best single measurement
    references: tuple[Reference, ...] = ()
    period: str | None = None  # the quarter of a `quarterly` campaign
    # Multi-fidelity: the search runs on screen.backend, then its best configs on `backend`.
    screen: mf.Screening | None = None
    # Measured beside the confirmation, outside the search (module docstring).
    compare: tuple[Reference, ...] = ()
    # Set on the Optuna study (e.g. a path campaign's path and parent, autotune.per_path).
    study_attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def study_name(self) -> str:
        return f"{self.deployment.name}:{self.campaign}"

    @property
    def search_backend(self) -> str:
        """The backend the sampler's proposals are measured on."""
        return self.screen.backend if self.screen else self.backend

    def options_of(self, backend: str) -> dict[str, Any]:
        return self.screen.options if self.screen and backend == self.screen.backend \
            else self.backend_options


class Observer:
    """Hooks for progress displays; the controller never draws anything itself."""

    def on_start(self, request: CampaignRequest) -> None: ...

    def on_trial(self, record: TrialRecord) -> None: ...

    def on_event(self, event: progress.Event) -> None:
        """What happens while trials run (autotune.progress): called in the controller's thread,
        the replay steps of trials included (inline, or carried back from Ray workers)."""


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


def _finite(value: Any) -> Any:
    """JSON for any database: NaN and infinities (no data) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _compare_doc(c: confirm.Confirmed) -> dict[str, Any]:
    return _finite({"role": c.candidate.role, "engine_config": dict(c.candidate.config),
                    "seeds": list(c.seeds), "samples": list(c.samples),
                    "failures": list(c.failures), "n": c.stats.n,
                    "mean_output_tok_s": c.stats.mean, "std_output_tok_s": c.stats.std,
                    "lcb_output_tok_s": c.stats.lcb, "gpu_hours": c.gpu_hours})


def comparisons(study: optuna.Study) -> list[dict[str, Any]]:
    """What `_compare` stored on a finished study (empty if it compared nothing)."""
    return list(study.user_attrs.get(keys.COMPARE, []))


class StudyController:
    def __init__(self, engine: Engine, storage_url: str, request: CampaignRequest,
                 executor: Executor, observer: Observer | None = None,
                 clock: Callable[[], float] = time.monotonic, lease_s: float = 30.0) -> None:
        self.engine, self.request, self.executor = engine, request, executor
        self.lease_s = lease_s  # how long a silent job is given before its campaign is taken
        self._lease: resume.Lease | None = None
        self.observer = observer or Observer()
        self.space = deployment_space(request.search_space, request.deployment)
        # Before a reference widens the space: one that needs a forbidden value is refused.
        accuracy.check_allowed(self.space, request.deployment, {
            **{ref.role if ref.tag == ref.role else f"{ref.role} {ref.tag}": ref.config
               for ref in request.references},
            **{f"baseline {role}": config.explicit()
               for role, config in baseline_configs(request.deployment).items()}})
        for ref in request.references:
            if ref.role == Role.SINGLE_CONFIG:  # a path's search starts from it, in its space or not
                self.space = hold_config(self.space, EngineConfig(**ref.config),
                                         request.deployment)
        # The sampler proposes from plan.space (the grid sampler's is two axes of this space).
        self.plan = make_sampler(request.sampler, self.space, seed=request.seed,
                                 parallel=request.parallel)
        self.storage = optuna.storages.RDBStorage(storage_url)
        self.clock = clock
        # Checked before anything is written: a baseline the space cannot hold is a bad request.
        self.baselines = baseline_configs(request.deployment)
        self.baseline_params = {role: space_params(self.plan.space, config, request.deployment)
                                for role, config in self.baselines.items()}
        self.reference_params = self._reference_params()
        self.records: list[TrialRecord] = []
        self.gpu_hours = 0.0  # spent by the search so far (restored on resume)
        self.stop_reason: str | None = None
        self._infra_in_a_row = 0
        # (fidelity, config) -> its measurement: a repeat reuses only its own fidelity's.
        self._seen: dict[tuple[str, str], TrialOutcome] = {}  # (fidelity, config key)
        self._in_flight: dict[int, _InFlight] = {}
        self._phase = request.search_backend  # the fidelity trials are being measured on

    # -- setup -------------------------------------------------------------------------------
    def _reference_params(self) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
        out = []
        for ref in self.request.references:
            try:
                params = space_params(self.plan.space, EngineConfig(**ref.config),
                                      self.request.deployment)
            except SearchSpaceError as exc:
                if ref.role == Role.INCUMBENT:  # the decision needs it measured: refuse to guess
                    raise ConfigError(f"the incumbent config cannot be expressed in search space "
                                      f"{self.request.search_space!r} ({exc}); tune with a "
                                      "space that holds it") from None
                log.warning("%s: warm start %s left out: %s", self.request.study_name, ref.tag,
                            exc)
                continue
            out.append((ref.tag, ref.role, params, dict(ref.config)))
        return out

    def _create_study(self) -> optuna.Study:
        # load_if_exists: a resumed campaign continues its study (the sampler starts afresh).
        study = optuna.create_study(study_name=self.request.study_name, storage=self.storage,
                                    direction="maximize", sampler=self.plan.sampler,
                                    load_if_exists=True)
        change = resume.sampler_change(study.user_attrs.get(keys.SAMPLER), self.plan.name,
                                       self.request.campaign, completed=False)
        if change:  # resuming with another sampler: it proposes from here on
            log.warning("%s: %s", self.request.study_name, change)
        with warnings.catch_warnings():  # "experimental" since Optuna 3.2, unchanged since
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([OBJECTIVE_NAME])  # the dashboard's axis and column title
        study.set_user_attr(keys.SLO, str(self.request.slo))
        study.set_user_attr(keys.SAMPLER, self.plan.name)
        study.set_user_attr(keys.DEPLOYMENT, self.request.deployment.name)
        for key, value in self.request.study_attrs.items():
            study.set_user_attr(key, value)
        resume.ensure_references(study, self.reference_params)  # before the baselines
        resume.ensure_baselines(study, self.baseline_params)
        return study

    def _restore(self, study: optuna.Study, campaign_id: int) -> int:
        """Settle what a dead job left and reload what it finished; returns the trials that
        count against the budget so far."""
        rows = resume.stored_trials(self.engine, campaign_id)
        requeued = resume.repair(self.storage, study, rows)
        for row in sorted(rows.values(), key=lambda t: t.number):
            record = TrialRecord.of_row(row)
            self.records.append(record)
            self.observer.on_trial(record)
            self.gpu_hours += row.gpu_hours
            if row.latency_recorded_rate is not None and row.repeat_of is None:
                self._seen.setdefault((row.fidelity, EngineConfig(**row.engine_config).key()),
                                      resume.outcome_of(row))
        # The budget counts the search's trials (a multi-fidelity campaign's screening ones).
        done = sum(1 for t in rows.values() if t.state != RecordState.REJECTED and t.repeat_of is None
                   and t.fidelity == self.request.search_backend)
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
        claim = resume.claim_campaign(self.engine, r, self.lease_s)  # refuses a live job's
        if claim.created and r.study_name in optuna.study.get_all_study_names(self.storage):
            claim.abandon()
            raise ConfigError(f"an Optuna study named {r.study_name!r} already exists in this "
                              "database; choose another --campaign name")
        try:
            # Workers before the study: an unreachable cluster leaves a new campaign no trace.
            self.executor.open(r.parallel, r.deployment.tensor_parallel_size)
        except BaseException:
            claim.abandon()
            raise
        self._lease = lease = claim.lease
        lease.start()
        campaign_id = claim.campaign_id
        with session_scope(self.engine) as s:  # the budget asked this time (a resume may change it)
            row = s.get(Campaign, campaign_id)
            assert row is not None
            row.budget, row.period = r.budget.to_dict(r.max_trials), r.period
        in_flight = self._in_flight
        status = "failed"
        message: str | None = "interrupted"
        study: optuna.Study | None = None
        try:
            study = self._create_study()
            self.observer.on_start(r)
            submitted = self._restore(study, campaign_id)
            asks = len(study.get_trials(deepcopy=False))
            with session_scope(self.engine) as s:  # a resumed job keeps the first one's reason
                row = s.get(Campaign, campaign_id)
                assert row is not None
                self.stop_reason = row.stop_reason
            if r.screen is None or not mf.screening_closed(study):
                def more() -> bool:
                    return (submitted < r.max_trials and asks < r.max_trials * ASKS_PER_TRIAL
                            and not self._budget_spent())

                while True:
                    while len(in_flight) < self.executor.slots and more():
                        asks += 1
                        job = self._ask(study, campaign_id)
                        if job is not None:
                            in_flight[job.trial.number] = job
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
                    with session_scope(self.engine) as s:
                        row = s.get(Campaign, campaign_id)
                        assert row is not None
                        row.stop_reason = self.stop_reason
            if r.screen is not None:
                self._measure_real(study, campaign_id)
            self._confirm(campaign_id, study)
            status, message = "completed", None
        except BaseException as exc:
            message = f"{type(exc).__name__}: {exc}"
            if study is not None and not lease.lost:
                self._requeue_in_flight(study, in_flight)
            raise
        finally:
            self.executor.close()
            lease.finish(status, message, self.clock() - t0)
        return campaign_id

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
        assert r.screen is not None
        if not mf.screening_closed(study):
            dropped = mf.close_screening(self.storage, study, r.screen.backend)
            if dropped:
                log.warning("%s: screening closed; waiting trials %s left unrun", r.study_name,
                            ", ".join(map(str, dropped)))
        screened = [t for t in self.records if t.fidelity == r.screen.backend]
        references = [(tag, role) for tag, role, _, _ in self.reference_params
                      if role == Role.INCUMBENT] + [(role, role) for role in self.baselines]
        runs = mf.plan(screened, r.screen.top, references)
        dep = r.deployment
        added = mf.enqueue(study, [(run, space_params(self.plan.space, EngineConfig(**run.config),
                                                      dep)) for run in runs], r.backend)
        self._phase = r.backend
        self._infra_in_a_row = 0
        log.info("%s: screening on %s done; %d configs to measure on %s (%d enqueued now)",
                 r.study_name, r.screen.backend, len(runs), r.backend, added)
        while True:
            while len(self._in_flight) < self.executor.slots and mf.waiting_real(study, r.backend):
                job = self._ask(study, campaign_id)
                if job is not None:
                    self._in_flight[job.trial.number] = job
            if not self._drain(study, campaign_id):
                break

    def _budget_spent(self) -> str | None:
        return self.request.budget.spent(self.gpu_hours, time.time())

    def _confirm(self, campaign_id: int, study: optuna.Study) -> None:
        """Re-run the best configs, the incumbent and the baselines with the same other seeds,
        then measure the comparison configs; store the results and why the search stopped in
        one transaction."""
        r = self.request
        confirmed: list[confirm.Confirmed] = []
        template = TrialSpec(study_name=r.study_name, trial_number=0,
                             config=EngineConfig(**deployment_args(r.deployment)),
                             deployment=r.deployment, trace=r.trace, slo=r.slo,
                             backend=r.backend, seed=r.seed, search=r.search,
                             backend_options=r.backend_options)
        if r.confirm is not None:
            rows = [t for t in self.records if t.fidelity == r.backend]  # never a screening one
            # The baselines too, with the same seeds: every gain is then confirmed against
            # confirmed (autotune.gains), never against one search draw.
            chosen = confirm.candidates(rows, r.confirm.top,
                                        include_roles=(Role.INCUMBENT, Role.SINGLE_CONFIG,
                                                       *BASELINES))
            confirmed = confirm.run(self.executor, template, chosen, r.confirm)
        compared = self._compare(template)
        if self._lease is not None:
            self._lease.check()
        if r.compare:  # before our row: a job killed in between confirms and compares afresh
            study.set_user_attr(keys.COMPARE, [_compare_doc(c) for c in compared])
        with session_scope(self.engine) as s:
            row = s.get(Campaign, campaign_id)
            assert row is not None
            row.stop_reason = self.stop_reason
            if r.confirm is not None:
                confirm.save(s, row, confirmed)
            row.gpu_hours = (row.gpu_hours or 0.0) + sum(c.gpu_hours for c in compared)

    def _compare(self, template: TrialSpec) -> list[confirm.Confirmed]:
        """Measure the comparison configs with the confirmation's seeds (without confirmation,
        once with the search's seed, beside the best single measurement)."""
        r = self.request
        if not r.compare:
            return []
        plan = r.confirm or ConfirmPlan(top=0, repeats=1, base_seed=r.seed - 1)
        chosen = [confirm.Candidate(trial_number=-1 - i, role=ref.role, config=dict(ref.config),
                                    search_output_tok_s=0.0) for i, ref in enumerate(r.compare)]
        ran = confirm.run(self.executor, template, chosen, plan)
        return [dataclasses.replace(c, winner=False) for c in ran]  # a comparison never wins

    def _requeue_in_flight(self, study: optuna.Study, in_flight: dict[int, _InFlight]) -> None:
        """Never leave a RUNNING trial behind: a later `tune` runs these parameters again."""
        for number, job in in_flight.items():
            try:
                resume.requeue(self.storage, study, self.storage.get_trial(job.trial._trial_id))
            except Exception as exc:  # the database may be what failed; resume repairs it
                log.error("%s trial %d: could not re-queue it (%s); a resume will",
                          self.request.study_name, number, exc)

    def _check_health(self, outcome: TrialOutcome) -> None:
        """Stop instead of burning the budget when the setup, not a config, is what fails."""
        self._infra_in_a_row = (self._infra_in_a_row + 1
                                if outcome.failure_class in NOT_THE_CONFIG else 0)
        if self._infra_in_a_row >= MAX_INFRA_FAILURES_IN_A_ROW:
            raise InfrastructureError(f"{self._infra_in_a_row} trials in a row failed in the workers "
                              f"(last: {outcome.failure_message}); check the executor and the "
                              "backend's setup before tuning again")
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
        # The trial record shows what vLLM will run: its defaults, its silent overrides, pins.
        effective, overridden = resolved(config, dep)
        trial.set_user_attr(keys.VLLM_EFFECTIVE, effective)
        if overridden:
            trial.set_user_attr(keys.VLLM_OVERRIDES, overridden)
        if self.space.pinned:
            trial.set_user_attr(keys.PINNED, dict(self.space.pinned))
        broken = violations(self.space, config, dep)
        # Baselines are references: they run unless they are known to fail.
        blocking = [v for v in broken if role == Role.PROPOSED or v.severity == "error"]
        if blocking:
            self._tell_rejected(study, campaign_id, trial, role, config, blocking)
            return None
        key = (fidelity, config.key())
        if key in self._seen:  # the sampler repeated a config: reuse its measurement
            first = self._seen[key].trial_number
            trial.set_user_attr(keys.REPEAT_OF, first)
            outcome = self._seen[key].model_copy(update={"trial_number": trial.number})
            self._finish(study, campaign_id, _InFlight(trial, role, config, [], fidelity, first),
                         outcome)
            return None
        spec = TrialSpec(study_name=self.request.study_name, trial_number=trial.number,
                         config=config, deployment=dep, trace=self.request.trace,
                         slo=self.request.slo, backend=fidelity,
                         seed=self.request.seed, search=self.request.search,
                         backend_options=self.request.options_of(fidelity))
        # What the progress line of its start leaves out (that line says it started).
        log.info("%s trial %d (%s, %s): engine arguments %s", spec.study_name, trial.number,
                 role, fidelity, " ".join(config.to_cli_args()))
        self.executor.submit(spec)
        progress.emit(progress.TrialStarted(spec.study_name, trial.number, role, fidelity,
                                            self.gpu_hours))
        return _InFlight(trial, role, config, [v.rule for v in broken], fidelity, spec=spec)

    def _set_constraints(self, trial: OptunaTrial, constraints: dict[str, float]) -> None:
        for name, value in constraints.items():
            trial.set_constraint(name, value)
            trial.set_user_attr(f"{keys.CONSTRAINT_PREFIX}{name}", value)
        # optuna-dashboard 0.21 reads only the old list attribute; without it its "best value"
        # line follows infeasible trials.
        self.storage.set_trial_system_attr(trial._trial_id, "constraints",
                                           list(constraints.values()))

    def _tell_rejected(self, study: optuna.Study, campaign_id: int, trial: OptunaTrial, role: str,
                       config: EngineConfig, broken: list[Any]) -> None:
        constraints = rejected_constraints(self.request.slo, len(broken))
        message = "; ".join(f"{v.rule}: {v.message}" for v in broken)
        self._set_constraints(trial, constraints)
        trial.set_user_attr(keys.ROLE, role)
        trial.set_user_attr(keys.FIDELITY, self._phase)
        trial.set_user_attr(keys.FEASIBLE, False)
        trial.set_user_attr(keys.FAILURE_CLASS, FailureClass.RULE_VIOLATION)
        trial.set_user_attr(keys.FAILURE_MESSAGE, message)
        trial.set_user_attr(keys.OUTCOME, RecordState.REJECTED)
        # The dashboard shows a trial's note above everything else on its page. (Imported here:
        # the package takes 0.4 s to import, and most campaigns reject little.)
        from optuna_dashboard import save_note

        save_note(trial, f"**Rejected, not measured**: no engine was started, because the "
                         f"config breaks {', '.join(v.rule for v in broken)}. Its value 0 is "
                         "no measurement.")
        # DEBUG: the progress line of its record says it at INFO (once, not twice).
        log.debug("%s trial %d (%s): rejected without an engine: %s",
                  self.request.study_name, trial.number, role, message)
        record = TrialRecord(
            number=trial.number, role=role, state=RecordState.REJECTED, feasible=False,
            capacity_output_tok_s=0.0, config=config.explicit(), failure_class=FailureClass.RULE_VIOLATION,
            failure_message=message, constraints=constraints, fidelity=self._phase)
        self._store(campaign_id, record, capacity_rate_scale=0.0)
        self._tell(study, trial, record)

    def _finish(self, study: optuna.Study, campaign_id: int, job: _InFlight,
                outcome: TrialOutcome) -> None:
        constraints = outcome_constraints(outcome, self.request.slo)
        feasible = is_feasible(constraints)
        trial = job.trial
        self._set_constraints(trial, constraints)
        trial.set_user_attr(keys.ROLE, job.role)
        trial.set_user_attr(keys.FIDELITY, job.fidelity)
        trial.set_user_attr(keys.CAPACITY, outcome.capacity_output_tok_s)
        if job.slow_rules:
            trial.set_user_attr(keys.SLOW_RULES, job.slow_rules)
        if outcome.notes:
            trial.set_user_attr(keys.BACKEND_NOTES, outcome.notes)
        # Set on every trial: the dashboard's trial page shows user attributes only (not the
        # constraint list), so "feasible" and "failure_class none" must be there to be read.
        trial.set_user_attr(keys.FEASIBLE, feasible)
        trial.set_user_attr(keys.FAILURE_CLASS, outcome.failure_class or FailureClass.NONE)
        if outcome.failure_class:
            trial.set_user_attr(keys.FAILURE_MESSAGE, outcome.failure_message)
        if outcome.at_capacity is not None:
            for key in ("ttft_p99_ms", "tpot_p99_ms", "itl_p99_ms", "e2e_p99_ms"):
                trial.set_user_attr(key, getattr(outcome.at_capacity, key))
        if outcome.at_recorded_rate is not None:
            self._seen.setdefault((job.fidelity, job.config.key()), outcome)
        state = (RecordState.MEASURED if outcome.at_recorded_rate is not None
                 else RecordState.FAILED)
        trial.set_user_attr(keys.OUTCOME, state)
        # DEBUG: the progress line of its record says it at INFO (once, not twice).
        log.debug("%s trial %d (%s, %s): %s, capacity %.0f output tok/s%s",
                  self.request.study_name, trial.number, job.role, job.fidelity, state,
                  outcome.capacity_output_tok_s,
                  f" ({outcome.failure_class})" if outcome.failure_class else "")
        latency = outcome.at_capacity or outcome.at_recorded_rate
        record = TrialRecord(
            number=trial.number, role=job.role, state=state, feasible=feasible,
            capacity_output_tok_s=outcome.capacity_output_tok_s if feasible else 0.0,
            config=job.config.explicit(), latency=latency.model_dump() if latency else None,
            failure_class=outcome.failure_class, failure_message=outcome.failure_message,
            constraints=constraints, repeat_of=job.repeat_of, fidelity=job.fidelity)
        self._store(campaign_id, record, capacity_rate_scale=outcome.capacity_rate_scale,
                    outcome=outcome)
        self._tell(study, trial, record)

    # Writes go Optuna attributes, our row, Optuna's tell: a job killed between any two is
    # repaired on resume (resume.repair: a row without a tell is told; no row is re-queued).
    def _tell(self, study: optuna.Study, trial: OptunaTrial, record: TrialRecord) -> None:
        study.tell(trial, record.capacity_output_tok_s)  # 0 when infeasible
        self.records.append(record)
        self.observer.on_trial(record)

    def _store(self, campaign_id: int, record: TrialRecord, *, capacity_rate_scale: float,
               outcome: TrialOutcome | None = None) -> None:
        if self._lease is not None:
            self._lease.check()  # never write a result into a campaign another job has taken
        # A repeat reused a measurement and a rejected config started nothing: no GPU time; a
        # multi-fidelity campaign's screening trial was simulated: it held no GPU either.
        screening = self.request.screen is not None and record.fidelity == self.request.screen.backend
        gpu_hours = 0.0 if outcome is None or record.repeat_of is not None or screening \
            else budgets.gpu_hours(outcome.start_s, outcome.measure_s,
                                   self.request.deployment.tensor_parallel_size)
        with session_scope(self.engine) as s:
            campaign = s.get(Campaign, campaign_id)
            assert campaign is not None
            campaign.gpu_hours = (campaign.gpu_hours or 0.0) + gpu_hours
            repo.add_trial(
                s, campaign, number=record.number, role=record.role,
                engine_config=record.config, fidelity=record.fidelity, state=record.state,
                feasible=record.feasible,
                capacity_output_tok_s=record.capacity_output_tok_s,
                capacity_rate_scale=capacity_rate_scale, latency=_finite(record.latency),
                latency_recorded_rate=_finite(outcome.at_recorded_rate.model_dump()
                                              if outcome and outcome.at_recorded_rate else None),
                constraints=_finite(record.constraints),
                replays=_finite(outcome.replays) if outcome else [],
                failure_class=record.failure_class, failure_message=record.failure_message,
                start_s=outcome.start_s if outcome else 0.0,
                measure_s=outcome.measure_s if outcome else 0.0,
                started_at=(datetime.fromtimestamp(outcome.started_at_epoch_s, UTC)
                            if outcome and outcome.started_at_epoch_s else None),
                worker=outcome.worker if outcome else {}, repeat_of=record.repeat_of,
                telemetry=_finite(outcome.telemetry) if outcome else {}, gpu_hours=gpu_hours)
        self.gpu_hours += gpu_hours
