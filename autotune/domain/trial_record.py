"""The one finished-trial type: what observers, candidate selection and the screening plan see
of a trial once it has been told (a row of autotune_trials, less its replays and timings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial; `capacity_output_tok_s` is 0 unless it is feasible."""

    number: int
    role: str
    state: str  # RecordState: measured, rejected, failed
    feasible: bool
    capacity_output_tok_s: float
    config: dict[str, Any] = field(default_factory=dict)  # EngineConfig.explicit()
    repeat_of: int | None = None  # the trial whose measurement a repeated config reused
    latency: dict[str, Any] | None = None  # LatencySummary at capacity (or the recorded rate)
    failure_class: str | None = None
    failure_message: str | None = None
    # Each constraint's value, > 0 violated; one read back from the database is None where it was
    # not finite (stored as null: recorder.finite_json).
    constraints: Mapping[str, float | None] = field(default_factory=dict)
    fidelity: str = ""  # the backend that measured it
