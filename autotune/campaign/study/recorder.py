"""Where a finished trial is written: its Optuna attributes and constraints, its
autotune_trials row, and the GPU-hours it cost (the campaign row's and the search's total).

Writes go Optuna attributes, then our row; the loop then tells Optuna. A job killed between
any two is repaired on resume (repair.repair: a row without a tell is told; no row is
re-queued)."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime
from typing import Any

from optuna.storages import BaseStorage
from optuna.trial import Trial as OptunaTrial
from sqlalchemy import Engine

from autotune.campaign import budget as budgets
from autotune.campaign.study.request import CampaignRequest
from autotune.domain import optuna_keys as keys
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import TrialOutcome
from autotune.domain.trial_record import TrialRecord
from autotune.domain.vllm_defaults import resolved
from autotune.search.objective import (
    capacity_attrs,
    is_feasible,
    outcome_constraints,
    rejected_constraints,
)
from autotune.search.spaces import SearchSpace
from autotune.search.spaces.violations import Violation
from autotune.storage import repo
from autotune.storage.db import session_scope
from autotune.storage.lease import Lease
from autotune.storage.models import Campaign
from autotune.vocabulary import FailureClass, RecordState

log = logging.getLogger("autotune.study")
_AT_CAPACITY_P99_KEYS = ("ttft_p99_ms", "tpot_p99_ms", "itl_p99_ms", "e2e_p99_ms")


def finite_json(value: Any) -> Any:
    """JSON for any database: NaN and infinities (no data) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite_json(v) for v in value]
    return value


class TrialRecorder:
    def __init__(self, engine: Engine, storage: BaseStorage,
                 request: CampaignRequest) -> None:
        self.engine, self.storage, self.request = engine, storage, request
        self.lease: Lease | None = None  # the campaign's, once claimed
        self.gpu_hours = 0.0  # spent by the search so far (restored on resume)

    def describe(self, trial: OptunaTrial, config: EngineConfig, space: SearchSpace) -> None:
        """The trial record shows what vLLM will run: its defaults, its silent overrides, pins."""
        effective, overridden = resolved(config, self.request.deployment)
        trial.set_user_attr(keys.VLLM_EFFECTIVE, effective)
        if overridden:
            trial.set_user_attr(keys.VLLM_OVERRIDES, overridden)
        if space.pinned:
            trial.set_user_attr(keys.PINNED, dict(space.pinned))

    def rejected(self, campaign_id: int, trial: OptunaTrial, role: str, config: EngineConfig,
                 broken: list[Violation], fidelity: str) -> TrialRecord:
        """Record a config that breaks an interaction rule, told infeasible without an engine."""
        constraints = rejected_constraints(self.request.slo, len(broken))
        message = "; ".join(f"{v.rule}: {v.message}" for v in broken)
        self._set_constraints(trial, constraints)
        trial.set_user_attr(keys.ROLE, role)
        trial.set_user_attr(keys.FIDELITY, fidelity)
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
            capacity_output_tok_s=0.0, config=config.explicit(),
            failure_class=FailureClass.RULE_VIOLATION, failure_message=message,
            constraints=constraints, fidelity=fidelity)
        self.store(campaign_id, record, capacity_rate_scale=0.0)
        return record

    def finished(self, campaign_id: int, trial: OptunaTrial, outcome: TrialOutcome, *,
                 role: str, config: EngineConfig, fidelity: str, slow_rules: list[str],
                 repeat_of: int | None) -> TrialRecord:
        """Record a measured config (or one whose measurement a repeat reused)."""
        constraints = outcome_constraints(outcome, self.request.slo)
        feasible = is_feasible(constraints)
        self._set_constraints(trial, constraints)
        trial.set_user_attr(keys.ROLE, role)
        trial.set_user_attr(keys.FIDELITY, fidelity)
        trial.set_user_attr(keys.CAPACITY, outcome.capacity_output_tok_s)
        if slow_rules:
            trial.set_user_attr(keys.SLOW_RULES, slow_rules)
        if outcome.notes:
            trial.set_user_attr(keys.BACKEND_NOTES, outcome.notes)
        # Set on every trial: the dashboard's trial page shows user attributes only (not the
        # constraint list), so "feasible" and "failure_class none" must be there to be read.
        trial.set_user_attr(keys.FEASIBLE, feasible)
        trial.set_user_attr(keys.FAILURE_CLASS, outcome.failure_class or FailureClass.NONE)
        if outcome.failure_class:
            trial.set_user_attr(keys.FAILURE_MESSAGE, outcome.failure_message)
        if outcome.at_capacity is not None:
            for key in _AT_CAPACITY_P99_KEYS:
                trial.set_user_attr(key, getattr(outcome.at_capacity, key))
        for key, value in capacity_attrs(outcome, self.request.slo).items():
            trial.set_user_attr(key, value)
        state = (RecordState.MEASURED if outcome.at_recorded_rate is not None
                 else RecordState.FAILED)
        trial.set_user_attr(keys.OUTCOME, state)
        # DEBUG: the progress line of its record says it at INFO (once, not twice).
        log.debug("%s trial %d (%s, %s): %s, capacity %.0f output tok/s%s",
                  self.request.study_name, trial.number, role, fidelity, state,
                  outcome.capacity_output_tok_s,
                  f" ({outcome.failure_class})" if outcome.failure_class else "")
        latency = outcome.at_capacity or outcome.at_recorded_rate
        record = TrialRecord(
            number=trial.number, role=role, state=state, feasible=feasible,
            capacity_output_tok_s=outcome.capacity_output_tok_s if feasible else 0.0,
            config=config.explicit(), latency=latency.model_dump() if latency else None,
            failure_class=outcome.failure_class, failure_message=outcome.failure_message,
            constraints=constraints, repeat_of=repeat_of, fidelity=fidelity)
        self.store(campaign_id, record, capacity_rate_scale=outcome.capacity_rate_scale,
                   outcome=outcome)
        return record

    def _set_constraints(self, trial: OptunaTrial, constraints: dict[str, float]) -> None:
        for name, value in constraints.items():
            trial.set_constraint(name, value)
            trial.set_user_attr(f"{keys.CONSTRAINT_PREFIX}{name}", value)
        # optuna-dashboard 0.21 reads only the old list attribute; without it its "best value"
        # line follows infeasible trials.
        self.storage.set_trial_system_attr(trial._trial_id, "constraints",
                                           list(constraints.values()))

    def _gpu_hours_of(self, record: TrialRecord, outcome: TrialOutcome | None) -> float:
        # A repeat reused a measurement and a rejected config started nothing: no GPU time; a
        # multi-fidelity campaign's screening trial was simulated: it held no GPU either.
        screen = self.request.screen
        if outcome is None or record.repeat_of is not None or (
                screen is not None and record.fidelity == screen.backend):
            return 0.0
        return budgets.gpu_hours(outcome.start_s, outcome.measure_s,
                                 self.request.deployment.tensor_parallel_size)

    def store(self, campaign_id: int, record: TrialRecord, *, capacity_rate_scale: float,
              outcome: TrialOutcome | None = None) -> None:
        """Write the trial's autotune_trials row and add its GPU-hours to the campaign's."""
        if self.lease is not None:
            self.lease.check()  # never write a result into a campaign another job has taken
        gpu_hours = self._gpu_hours_of(record, outcome)
        with session_scope(self.engine) as s:
            campaign = s.get(Campaign, campaign_id)
            assert campaign is not None
            campaign.gpu_hours = (campaign.gpu_hours or 0.0) + gpu_hours
            repo.add_trial(
                s, campaign, number=record.number, role=record.role,
                engine_config=record.config, fidelity=record.fidelity, state=record.state,
                feasible=record.feasible,
                capacity_output_tok_s=record.capacity_output_tok_s,
                capacity_rate_scale=capacity_rate_scale, latency=finite_json(record.latency),
                latency_recorded_rate=finite_json(outcome.at_recorded_rate.model_dump()
                                                  if outcome and outcome.at_recorded_rate
                                                  else None),
                constraints=finite_json(record.constraints),
                replays=finite_json(outcome.replays) if outcome else [],
                failure_class=record.failure_class, failure_message=record.failure_message,
                start_s=outcome.start_s if outcome else 0.0,
                measure_s=outcome.measure_s if outcome else 0.0,
                started_at=(datetime.fromtimestamp(outcome.started_at_epoch_s, UTC)
                            if outcome and outcome.started_at_epoch_s else None),
                worker=outcome.worker if outcome else {}, repeat_of=record.repeat_of,
                telemetry=finite_json(outcome.telemetry) if outcome else {},
                gpu_hours=gpu_hours)
        self.gpu_hours += gpu_hours
