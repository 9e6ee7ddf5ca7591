"""One trial: start the engine, find the highest rate it sustains within the SLO, stop it.

Capacity under the SLO, not raw throughput: replaying at the recorded rate makes every config
that keeps up look the same, so the trace is replayed on one running engine at a ladder of rate
multipliers, then bisected between the last rate that met the SLO and the first that did not.
With `CapacitySearch.window_s` every replay offers the same length of traffic (the trace's head),
so capacity is a sustained rate at every multiplier rather than a burst's drain rate.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from autotune.domain.records import LatencySummary, TrialOutcome
from autotune.domain.step_timings import steps_to_json
from autotune.errors import EngineStartError, ReplayError
from autotune.measure import progress
from autotune.measure.backends import EngineBackend
from autotune.measure.metrics import concurrency, latency_quantiles_ms, meets, summarize
from autotune.measure.trial_spec import TrialSpec
from autotune.vocabulary import FailureClass

log = logging.getLogger("autotune.capacity")
# Each replay keeps its percentiles (the report draws latency against offered load from them)
# and its error rate; the simulator's calibration reads them too.
REPLAY_LATENCIES = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms",
                    "tpot_p99_ms", "e2e_p50_ms", "e2e_p90_ms", "e2e_p99_ms", "error_rate",
                    "request_s")


def run_trial(spec: TrialSpec, backend: EngineBackend) -> TrialOutcome:
    t0 = time.monotonic()
    label = f"{spec.study_name}-trial{spec.trial_number}"
    try:
        backend.start(spec.config, spec.deployment, label=label)
        backend.warmup(spec.trace, spec.seed)
    except EngineStartError as exc:
        log.info("%s trial %d: engine failed to start (%s): %s", spec.study_name,
                 spec.trial_number, exc.failure_class, exc)
        backend.stop()
        return TrialOutcome.failed(spec.trial_number, exc.failure_class, str(exc),
                                   start_s=time.monotonic() - t0)
    t1 = time.monotonic()
    notes = backend.notes()
    try:
        outcome = _search(spec, backend, start_s=t1 - t0, t1=t1)
    except ReplayError as exc:  # died or ran out of memory under load: not a config to publish
        log.info("%s trial %d: %s", spec.study_name, spec.trial_number, exc)
        outcome = TrialOutcome.failed(spec.trial_number, exc.failure_class, str(exc),
                                      start_s=t1 - t0, measure_s=time.monotonic() - t1)
    finally:
        telemetry = backend.telemetry()
        backend.stop()
    extra = {**({"telemetry": telemetry} if telemetry else {}), **({"notes": notes} if notes else {})}
    return outcome.model_copy(update=extra) if extra else outcome


def _search(spec: TrialSpec, backend: EngineBackend, *, start_s: float, t1: float) -> TrialOutcome:
    replays: list[dict[str, Any]] = []
    trace = spec.trace
    window_s = spec.search.window_s
    span_s = float(trace.duration_s) if window_s is not None else None

    def offered(scale: float) -> Any:
        """The trace a replay at `scale` plays: with a window, its first window_s * scale s."""
        if window_s is None or span_s is None or window_s * scale >= span_s:
            return trace
        arrival = np.asarray(trace.arrival_s)
        count = int(np.searchsorted(arrival, arrival[0] + window_s * scale, side="right"))
        return trace.slice(0, max(count, 1))

    quantiles: list[dict[str, list[float]]] = []  # per replay; kept for the one at capacity

    def measure(scale: float, phase: str, step: int, of: int) -> LatencySummary:
        played = offered(scale)
        span = float(played.duration_s)
        rate = len(played) / span * scale if span > 0 else 0.0  # requests over the trace's span
        progress.emit(progress.ReplayStep(spec.study_name, spec.trial_number, phase, step, of,
                                          scale, rate))
        result = backend.replay(played, scale, spec.seed)
        summary = summarize(result, spec.slo)
        lag = summary.send_lag_p99_ms
        client_bound = lag is not None and lag > spec.search.max_send_lag_p99_ms
        ok = meets(summary, spec.slo) and not client_bound
        mean_in_flight, peak_in_flight = concurrency(result)
        quantiles.append(latency_quantiles_ms(result))
        replays.append({"rate_scale": scale, "output_tok_s": summary.output_tok_s, "slo_ok": ok,
                        "send_lag_p99_ms": lag, "client_bound": client_bound,
                        # The trace's recorded rate (as `traffic show` gives it) x the multiplier.
                        "offered_request_s": rate if span > 0 else None,
                        "mean_concurrent_requests": mean_in_flight,
                        "max_concurrent_requests": peak_in_flight,
                        # Enough of each replay to calibrate a simulator against it later, and
                        # to draw its latencies against the load it was offered.
                        **{k: getattr(summary, k) for k in REPLAY_LATENCIES},
                        **({"step_times": steps_to_json(summary.step_times)}
                           if summary.step_times else {})})
        if client_bound:
            log.warning("%s trial %d: x%.3g is client-bound (send lag P99 %.1f ms > %.1f ms): "
                        "not used as a measurement", spec.study_name, spec.trial_number, scale,
                        lag, spec.search.max_send_lag_p99_ms)
        log.debug("%s trial %d: x%.3g -> %.0f tok/s, slo %s", spec.study_name, spec.trial_number,
                  scale, summary.output_tok_s, "ok" if ok else "missed")
        return summary

    best: tuple[float, LatencySummary] | None = None  # the highest multiplier that met the SLO
    passing: list[tuple[float, LatencySummary, int]] = []  # with the replay's index
    recorded = None
    failed_at: float | None = None
    ladder = spec.search.ladder(span_s)
    for rung, scale in enumerate(ladder, 1):
        summary = measure(scale, "ladder", rung, len(ladder))
        if scale == 1.0:
            recorded = summary
        if not replays[-1]["slo_ok"]:
            failed_at = scale
            break
        best = (scale, summary)
        passing.append((scale, summary, len(replays) - 1))
    if replays and replays[0]["client_bound"]:
        return TrialOutcome.failed(
            spec.trial_number, FailureClass.CLIENT_BOUND,
            "the replay client could not keep the schedule at the recorded rate; nothing was "
            "measured", start_s=start_s, measure_s=time.monotonic() - t1, replays=replays)
    if best is not None and failed_at is not None:
        lo, hi = best[0], failed_at
        for step in range(1, spec.search.bisect_steps + 1):
            mid = (lo * hi) ** 0.5  # geometric: rates span orders of magnitude
            summary = measure(mid, "bisect", step, spec.search.bisect_steps)
            if replays[-1]["slo_ok"]:
                lo, best = mid, (mid, summary)
                passing.append((mid, summary, len(replays) - 1))
            else:
                hi = mid
    measure_s = time.monotonic() - t1
    if window_s is not None and failed_at is None and best is not None and \
            ladder[-1] < spec.search.max_scale:
        log.warning("%s trial %d: met the SLO at x%.3g, the highest multiplier at which the "
                    "trace covers a %.0f s window: capacity is at least that (use a longer "
                    "trace)", spec.study_name, spec.trial_number, ladder[-1], window_s)
    if best is None:
        return TrialOutcome.failed(spec.trial_number, FailureClass.SLO_MISS,
                                   "misses the SLO at the recorded rate", at_recorded_rate=recorded,
                                   start_s=start_s, measure_s=measure_s, replays=replays)
    # The highest throughput among the replays that met the SLO: on short traces the measured
    # rate is not monotonic in the multiplier (a replay's drain tail counts), so the best
    # passing replay is taken, not merely the fastest-offered one.
    scale, summary, index = max(passing, key=lambda p: p[1].output_tok_s)
    # The replay at capacity keeps its latency distribution (a few percentiles, for its CDF).
    replays[index] = {**replays[index], "at_capacity": True, "quantiles": quantiles[index]}
    return TrialOutcome(trial_number=spec.trial_number,
                        capacity_output_tok_s=summary.output_tok_s,
                        capacity_rate_scale=scale, at_capacity=summary, at_recorded_rate=recorded,
                        start_s=start_s, measure_s=measure_s, replays=replays)
