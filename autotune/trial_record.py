"""The one finished-trial type: what observers, candidate selection and the screening plan see
of a trial once it has been told (a row of autotune_trials, less its replays and timings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.storage.models import Trial


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
    constraints: dict[str, float] = field(default_factory=dict)
    fidelity: str = ""  # the backend that measured it

    @classmethod
    def of_row(cls, row: Trial) -> TrialRecord:
        """The record of a stored trial (a resumed campaign's, or a finished one's report)."""
        return cls(number=row.number, role=row.role, state=row.state, feasible=row.feasible,
                   capacity_output_tok_s=row.capacity_output_tok_s,
                   config=dict(row.engine_config), repeat_of=row.repeat_of, latency=row.latency,
                   failure_class=row.failure_class, failure_message=row.failure_message,
                   constraints=dict(row.constraints), fidelity=row.fidelity)
