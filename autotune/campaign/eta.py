"""How long a campaign has left, from its budget and the mean trial time so far.

The search runs until its trials are done, its GPU-hours are spent or its deadline passes,
whichever comes first; the confirmation runs that follow take about a trial each. Trials run
`slots` at a time. An estimate, for a person watching: rejected and repeated configs (no engine,
no time) are left out of the mean, and a multi-fidelity campaign's real phase is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    max_trials: int
    slots: int = 1
    gpus_per_trial: int = 1
    max_gpu_hours: float | None = None
    deadline_epoch_s: float | None = None
    confirm_runs: int = 0  # configs confirmed x repeats (0: no confirmation)


def seconds_left(plan: Plan, *, trials_done: int, in_flight_elapsed_s: list[float],
                 mean_trial_s: float | None, gpu_hours_spent: float, now_epoch_s: float,
                 confirm_runs_done: int = 0) -> float | None:
    """Seconds until the campaign ends, or None before any trial has given a duration."""
    if mean_trial_s is None:
        return None
    slots = max(1, plan.slots)
    waiting = max(0, plan.max_trials - trials_done - len(in_flight_elapsed_s))
    # What the running trials have left, then the waiting ones, spread over the slots.
    running_s = sum(max(0.0, mean_trial_s - e) for e in in_flight_elapsed_s)
    search_s = (waiting * mean_trial_s + running_s) / slots
    if plan.max_gpu_hours is not None:  # GPU time flows at slots x GPUs per trial
        gpu_left_s = max(0.0, plan.max_gpu_hours - gpu_hours_spent) * 3600.0
        search_s = min(search_s, max(running_s / slots,
                                     gpu_left_s / (slots * max(1, plan.gpus_per_trial))))
    if plan.deadline_epoch_s is not None:  # trials in flight finish after the deadline
        search_s = min(search_s, max(running_s / slots, plan.deadline_epoch_s - now_epoch_s))
    confirm_s = max(0, plan.confirm_runs - confirm_runs_done) * mean_trial_s / slots
    return search_s + confirm_s
