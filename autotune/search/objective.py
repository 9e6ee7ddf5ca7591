"""The objective: capacity under the SLO, with constraint values Optuna's samplers learn from.

Every trial reports the same constraint names (value <= 0 means satisfied):
- one per SLO ceiling: relative excess at the recorded rate ((measured - ceiling) / ceiling);
- error_rate: the fraction of requests that failed;
- engine_start: 1 if the engine did not start or the worker failed;
- interaction_rules: how many interaction rules the config breaks (no engine is started then).
A failed or rejected config is a completed trial with value 0 and positive constraints, so the
sampler learns where failures are (TPE learns nothing from FAIL trials).
"""

from __future__ import annotations

import math
from typing import Any

from autotune.domain import optuna_keys as keys
from autotune.domain.records import TrialOutcome
from autotune.domain.slo import SLO
from autotune.measure.metrics import slo_violations

# The study's one objective as the dashboard names it (Optuna's study.set_metric_names).
OBJECTIVE_NAME = "output tok/s at capacity"


def constraint_names(slo: SLO) -> list[str]:
    return [c.key for c in slo.ceilings] + ["error_rate", "engine_start", "interaction_rules"]


def outcome_constraints(outcome: TrialOutcome, slo: SLO) -> dict[str, float]:
    names = constraint_names(slo)
    values = dict.fromkeys(names, 1.0)
    values["interaction_rules"] = 0.0
    if outcome.at_recorded_rate is None:  # never measured: start failure or worker crash
        values["engine_start"] = 1.0
        return values
    values.update(slo_violations(outcome.at_recorded_rate, slo))
    values["engine_start"] = 0.0
    return values


def capacity_attrs(outcome: TrialOutcome, slo: SLO) -> dict[str, Any]:
    """What the line sweep reads of the replay at capacity, as trial user attributes (empty
    without a capacity): per SLO ceiling the share of it used (P99 / ceiling; the largest is
    the ceiling that bound the capacity), and the most requests in flight (running or
    queued, all DP ranks)."""
    if outcome.at_capacity is None:
        return {}
    values = outcome.at_capacity.model_dump()
    use = {c.key: values[c.key] / c.limit_ms for c in slo.ceilings}
    replay = next((r for r in outcome.replays if r.get("at_capacity")), {})
    peak = replay.get("max_concurrent_requests")
    return {keys.SLO_USE: {k: round(v, 4) for k, v in use.items() if math.isfinite(v)},
            keys.PEAK_IN_FLIGHT: int(peak) if peak is not None else None}


def rejected_constraints(slo: SLO, broken_rules: int) -> dict[str, float]:
    values = dict.fromkeys(constraint_names(slo), 1.0)
    values["engine_start"] = 0.0
    values["interaction_rules"] = float(broken_rules)
    return values


def is_feasible(constraints: dict[str, float]) -> bool:
    return all(v <= 0 for v in constraints.values())
