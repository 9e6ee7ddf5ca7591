"""Measured replays of a campaign's trials, as the records a simulator is calibrated against.

Every trial keeps its replays (rate multiplier, output throughput and latency percentiles, and
on real engines the decode step time by batch size, see autotune.domain.step_timings). A
trial from before replays carried latencies contributes its two summaries instead: the one at
capacity and the one at the recorded rate. A trial that missed the SLO was still measured and
counts; client-bound replays measured the client, not the engine, and are left out, as are
trials whose engine failed (they have no replays).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import Measurement
from autotune.domain.step_timings import StepTime, steps_from_json
from autotune.errors import ConfigError
from autotune.storage.models import Campaign, Trial
from autotune.storage.repo import spec_of
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import Trace

OBSERVED = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
            "e2e_p50_ms", "error_rate")


def campaign_trace(campaign: Campaign) -> Trace:
    path = Path(campaign.trace_ref)
    if not path.is_file():
        raise ConfigError(f"campaign {campaign.name!r} replayed {campaign.trace_ref}, which is no "
                          "longer there; restore the file to calibrate against this campaign")
    trace = load_trace(path)
    if trace.digest != campaign.trace_digest:
        raise ConfigError(f"{campaign.trace_ref} has changed since campaign {campaign.name!r} "
                          "replayed it (its digest differs); calibrate against the file it used")
    return trace


def _observed(values: dict[str, Any]) -> dict[str, float]:
    return {k: float(values[k]) for k in OBSERVED
            if isinstance(values.get(k), int | float) and math.isfinite(values[k])}


_Point = tuple[float, dict[str, float], tuple[StepTime, ...]]  # rate, observed, steps


def _points(trial: Trial) -> list[_Point]:
    replays = [r for r in trial.replays if not r.get("client_bound") and "ttft_p99_ms" in r]
    if replays:
        return [(float(r["rate_scale"]), _observed(r), steps_from_json(r))
                for r in replays]
    points: list[_Point] = []
    if trial.latency:
        points.append((trial.capacity_rate_scale, _observed(trial.latency), ()))
    if trial.latency_recorded_rate and trial.capacity_rate_scale != 1.0:
        points.append((1.0, _observed(trial.latency_recorded_rate), ()))
    return points


def campaign_measurements(campaign: Campaign) -> list[Measurement]:
    trace = campaign_trace(campaign)
    deployment = spec_of(campaign.deployment)
    found = []
    for trial in sorted(campaign.trials, key=lambda t: t.number):
        if trial.repeat_of is not None:  # the same measurement as the trial it repeats
            continue
        config = EngineConfig.from_mapping(trial.engine_config)
        for scale, observed, steps in _points(trial):
            if "output_tok_s" in observed and scale > 0:
                found.append(Measurement(config=config, deployment=deployment, trace=trace,
                                         rate_scale=scale, seed=campaign.seed, observed=observed,
                                         source=f"campaign {campaign.name} trial {trial.number}",
                                         step_times=steps))
    return found
