"""A campaign's stored trials back into memory: its rows, and the measurement each holds (what a
resumed job reloads instead of measuring again)."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import Engine, select

from autotune.domain.records import LatencySummary, TrialOutcome
from autotune.storage.db import session_scope
from autotune.storage.models import Trial
from autotune.vocabulary import FailureClass


def stored_trials(engine: Engine, campaign_id: int) -> dict[int, Trial]:
    """The campaign's trial rows by Optuna trial number."""
    with session_scope(engine) as s:
        return {t.number: t for t in s.scalars(select(Trial).where(
            Trial.campaign_id == campaign_id))}


def _summary(data: dict[str, Any] | None) -> LatencySummary | None:
    if data is None:
        return None
    fields = LatencySummary.model_fields
    # Stored JSON turned NaN into null; the required floats get their NaN back.
    return LatencySummary.model_validate(
        {k: (math.nan if v is None and k in fields and fields[k].is_required() else v)
         for k, v in data.items()})


def outcome_of(row: Trial) -> TrialOutcome:
    """The measurement a stored trial holds, as the executor once returned it."""
    return TrialOutcome(
        trial_number=row.number, capacity_output_tok_s=row.capacity_output_tok_s,
        capacity_rate_scale=row.capacity_rate_scale,
        at_capacity=_summary(row.latency) if row.capacity_rate_scale > 0 else None,
        at_recorded_rate=_summary(row.latency_recorded_rate),
        failure_class=FailureClass(row.failure_class) if row.failure_class else None,
        failure_message=row.failure_message,
        start_s=row.start_s, measure_s=row.measure_s, replays=list(row.replays),
        started_at_epoch_s=row.started_at.timestamp() if row.started_at else 0.0,
        worker=dict(row.worker), telemetry=dict(row.telemetry))
