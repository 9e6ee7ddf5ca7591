"""A campaign's budget besides its trial count: GPU-hours and a wall-clock deadline.

GPU time is engine wall time (start-up plus capacity search) times the GPUs the trial held,
summed over the trials that started an engine; a rejected or repeated config costs nothing. The
search stops asking for new trials once either limit is reached; trials already in flight
finish, and the confirmation runs that follow are counted in what was spent but never stopped
by it (a decision needs them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from autotune.errors import SettingError

MAX_TRIALS, MAX_GPU_HOURS, DEADLINE = "max_trials", "max_gpu_hours", "deadline"


@dataclass(frozen=True)
class Budget:
    max_gpu_hours: float | None = None
    deadline_epoch_s: float | None = None  # wall clock (time.time())

    def spent(self, gpu_hours: float, now_epoch_s: float) -> str | None:
        """Which limit is reached, or None."""
        if self.max_gpu_hours is not None and gpu_hours >= self.max_gpu_hours:
            return MAX_GPU_HOURS
        if self.deadline_epoch_s is not None and now_epoch_s >= self.deadline_epoch_s:
            return DEADLINE
        return None

    def to_dict(self, max_trials: int) -> dict[str, Any]:
        deadline = (datetime.fromtimestamp(self.deadline_epoch_s, UTC).isoformat()
                    if self.deadline_epoch_s is not None else None)
        return {"max_trials": max_trials, "max_gpu_hours": self.max_gpu_hours,
                "deadline": deadline}


def parse_deadline(value: str | None, now: datetime) -> float | None:
    """The deadline setting: an ISO 8601 time (UTC where no zone is given) as epoch seconds; it must be
    ahead of `now`."""
    if value is None:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise SettingError("{deadline} {got!r} is not an ISO 8601 time, e.g. "
                           "2026-10-03T18:00:00+00:00", got=value) from None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    if when <= now:
        raise SettingError("{deadline} {got} has already passed", got=when.isoformat())
    return when.timestamp()


def check_max_gpu_hours(value: float | None) -> float | None:
    if value is not None and not value > 0:  # NaN too
        raise SettingError("{max_gpu_hours} must be positive")
    return value


def gpu_hours(start_s: float, measure_s: float, gpus: int) -> float:
    return (start_s + measure_s) * gpus / 3600.0
