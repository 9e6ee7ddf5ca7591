"""Immutable records that cross module and process boundaries (to Ray workers and back)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.step_timings import StepTime
from autotune.vocabulary import FailureClass


@dataclass(frozen=True)
class ReplayResult:
    """Per-request measurements of one replay, columnar. Times are seconds measured from each
    request's intended send time (so a late client cannot hide queueing). NaN = not reached."""

    scheduled_s: np.ndarray
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    output_tokens: np.ndarray  # tokens received
    failed: np.ndarray  # bool: server error, dropped connection, or not finished in time
    itl_s: np.ndarray  # gaps between consecutive tokens, all requests together
    itl_weight: np.ndarray  # how many gaps each itl_s value stands for (1 for real replays)
    wall_s: float  # from the first intended send to the last completion
    engine_stats: dict[str, float] = field(default_factory=dict)  # e.g. preemptions
    # Real replays: how late each request left the client (the simulator has none).
    send_lag_s: np.ndarray | None = None
    # From the intended send time to the step that first scheduled the request (the simulator
    # knows it; a real replay sees only TTFT, which includes it).
    queue_s: np.ndarray | None = None
    # Real replays: the engine's decode step time by batch size, and its prefill steps
    # (autotune.domain.step_timings).
    step_times: tuple[StepTime, ...] = ()


class LatencySummary(BaseModel):
    """One replay summarised; the same fields for the simulator and real engines."""

    model_config = ConfigDict(frozen=True)

    requests: int
    completed: int
    error_rate: float
    duration_s: float
    output_tok_s: float
    request_s: float
    ttft_p50_ms: float
    ttft_p90_ms: float
    ttft_p99_ms: float
    ttft_p99_9_ms: float
    tpot_p50_ms: float
    tpot_p90_ms: float
    tpot_p99_ms: float
    tpot_p99_9_ms: float
    itl_p50_ms: float
    itl_p90_ms: float
    itl_p99_ms: float
    itl_p99_9_ms: float
    e2e_p50_ms: float
    e2e_p90_ms: float
    e2e_p99_ms: float
    e2e_p99_9_ms: float
    send_lag_p99_ms: float | None = None  # real replays: how late the client sent (P99)
    goodput_request_s: float | None = None  # requests/s within every per-request ceiling
    queue_p50_ms: float | None = None  # simulated replays: time waiting to be scheduled
    queue_p99_ms: float | None = None
    engine_stats: dict[str, float] = {}
    step_times: tuple[StepTime, ...] = ()  # real replays: decode and prefill step times


@dataclass(frozen=True)
class CapacitySearch:
    """How a trial looks for the highest sustainable rate: rate multipliers 1, factor,
    factor**2, ... up to max_scale until the SLO breaks, then bisection between the last rate
    that met it and the first that did not.

    window_s (None: off) makes every replay offer the same length of traffic: at multiplier m
    the replay is the trace's first window_s * m recorded seconds, so it lasts window_s at the
    offered rate. Without it a replay at m lasts the trace's span / m, and at high multipliers a
    short trace collapses into one burst whose drain rate is measured, not a sustained rate.
    With it the ladder stops at the multiplier at which the trace no longer covers the window
    (`top_scale`)."""

    factor: float = 2.0
    max_scale: float = 1024.0
    bisect_steps: int = 3
    # A replay whose client sent later than this (P99) measured the client, not the engine.
    max_send_lag_p99_ms: float = 5.0
    window_s: float | None = None

    def top_scale(self, trace_duration_s: float | None = None) -> float:
        """The highest multiplier the search measures on a trace that spans trace_duration_s."""
        if self.window_s is None or trace_duration_s is None:
            return self.max_scale
        return max(1.0, min(self.max_scale, trace_duration_s / self.window_s))

    def ladder(self, trace_duration_s: float | None = None) -> list[float]:
        top = self.top_scale(trace_duration_s)
        scales = [1.0]
        while scales[-1] * self.factor <= top:
            scales.append(scales[-1] * self.factor)
        return scales


class TrialOutcome(BaseModel):
    """What a trial found. failure_class is None when the engine ran and was measured."""

    model_config = ConfigDict(frozen=True)

    trial_number: int
    capacity_output_tok_s: float
    capacity_rate_scale: float  # the rate multiplier at which capacity was measured (0: none)
    at_capacity: LatencySummary | None
    at_recorded_rate: LatencySummary | None
    failure_class: FailureClass | None = None
    failure_message: str | None = None
    start_s: float = 0.0
    measure_s: float = 0.0
    replays: list[dict[str, Any]] = []  # rate_scale, output_tok_s, slo_ok per replay
    started_at_epoch_s: float = 0.0  # wall clock where the trial ran
    worker: dict[str, Any] = {}  # where it ran: host, pid, the GPUs it was given
    telemetry: dict[str, Any] = {}  # GPU memory and utilisation seen during the trial
    notes: dict[str, str] = {}  # how a simulated engine was modelled (EngineBackend.notes)

    @classmethod
    def failed(cls, trial_number: int, failure_class: FailureClass, message: str,
               **fields: Any) -> TrialOutcome:
        """An outcome with no capacity: the engine failed, the SLO was missed, or nothing could
        be measured. `fields` adds what is known (timings, the summary at the recorded rate)."""
        values: dict[str, Any] = {"at_capacity": None, "at_recorded_rate": None, **fields}
        return cls(trial_number=trial_number, capacity_output_tok_s=0.0, capacity_rate_scale=0.0,
                   failure_class=failure_class, failure_message=message, **values)


def percentile_ms(values: np.ndarray, q: float, weights: np.ndarray | None = None) -> float:
    """The q-th percentile in milliseconds (inverted CDF); NaN when there are no values."""
    keep = ~np.isnan(values)
    v = values[keep]
    if not len(v):
        return float("nan")
    if weights is None:
        return float(np.percentile(v, q) * 1000.0)
    return float(np.percentile(v, q, weights=weights[keep], method="inverted_cdf") * 1000.0)


@dataclass(frozen=True)
class Measurement:
    """One replay measured on a real engine: what a simulator is calibrated against."""

    config: EngineConfig
    deployment: DeploymentSpec
    trace: Any  # autotune.traffic.trace.Trace
    rate_scale: float
    seed: int
    observed: dict[str, float]  # output_tok_s, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms, ...
    source: str = ""  # e.g. "campaign 3 trial 7"
    step_times: tuple[StepTime, ...] = ()  # the replay's step times, if measured
    # Each completed request's TTFT, ms, where kept: the fidelity benchmark takes P99 TTFT over
    # several replays' requests together, more than one replay has.
    ttft_each_ms: tuple[float, ...] = ()


@dataclass(frozen=True)
class CalibrationResult:
    """A fitted simulator profile and how well it fits (mean absolute relative error per
    metric, before and after the fit)."""

    profile_yaml: str
    profile_path: str | None  # where it was saved, if it was
    error_before: dict[str, float]
    error_after: dict[str, float]
    measurements: int
    evaluations: int
