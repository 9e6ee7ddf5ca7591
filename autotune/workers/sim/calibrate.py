"""Fit a simulator profile to real measurements.

Each measurement is one real replay (engine arguments, trace, rate multiplier, the measured
output throughput and latency percentiles, and the engine's decode step time by batch size and
its prefill steps, autotune.domain.step_timings). The fit simulates every measurement with candidate
coefficients and minimises the mean squared log error over the metrics below, with Nelder-Mead
on the logarithms of the coefficients (they are positive and span orders of magnitude). The
step timings are set against the step model directly: replays alone let a fit trade the fixed
per-step cost against the per-sequence one and still match throughput, and prefill against the
frontend's share of TTFT (docs/benchmarks/simulator-fidelity.md). The fit is deterministic: the
profile's run-to-run jitter is off while fitting.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import scipy.optimize

from autotune.domain.records import LatencySummary, Measurement, ReplayResult
from autotune.domain.step_timings import StepTime
from autotune.errors import ConfigError, EngineStartError
from autotune.measure.metrics import summarize
from autotune.workers.sim.engine import replay, start_perf
from autotune.workers.sim.perf import EngineShape, PerfModel, StartFailure
from autotune.workers.sim.profile import Profile
from autotune.workers.sim.shape import engine_shape

# Coefficients the fit moves; the memory ones come from the hardware, not from timings.
FIT_COEFFICIENTS = ("cpu_step_s", "cpu_seq_s", "cpu_prefill_token_s", "hbm_efficiency",
                    "compute_efficiency", "attention_efficiency", "frontend_s",
                    "cpu_small_batch_seq_s")
# Metric -> weight in the loss. Medians pin the step times; the tail is what SLOs judge.
TARGETS = {"output_tok_s": 1.0, "tpot_p50_ms": 1.0, "ttft_p50_ms": 0.5, "ttft_p99_ms": 0.5}
# A replay's step timings (autotune.domain.step_timings), each kind one term, each batch size or
# prompt-length bin counting alike within it: decode steps pin the step model's form, prefill
# steps its prompt cost apart from the frontend's (TTFT holds both).
STEP_METRICS, STEP_WEIGHT = ("decode_step_ms", "prefill_step_ms"), 1.0
# Prefill steps are single gaps, each as noisy as one token gap: pooled by prompt length into
# at most this many bins of at least MIN_PREFILL_STEPS, each judged by its median ratio.
PREFILL_BINS, MIN_PREFILL_STEPS = 4, 5
_FLOOR = 1e-9  # a coefficient the base profile leaves at 0 starts here ...
# ... unless it has a scale of its own: a frontend's way takes about a millisecond, 14 e-folds
# above the floor, and the simplex's first steps are 0.7 of one.
_ZERO_START = {"frontend_s": 1e-3, "cpu_small_batch_seq_s": 1e-4}


@dataclass(frozen=True)
class _Case:
    measurement: Measurement
    shape: EngineShape
    slowdown: float = 1.0  # how much slower the host ran this replay than the profile's


def predict(measurement: Measurement, profile: Profile, *, shape: EngineShape | None = None,
            cpu_kvcache_space_gib: float = 1.0) -> LatencySummary | None:
    """The simulator's summary of one measured replay; None if it would not start."""
    result = simulate(measurement, profile, shape=shape,
                      cpu_kvcache_space_gib=cpu_kvcache_space_gib)
    return None if result is None else summarize(result)


def simulate(measurement: Measurement, profile: Profile, *, shape: EngineShape | None = None,
             cpu_kvcache_space_gib: float = 1.0) -> ReplayResult | None:
    """The simulator's replay of one measured replay; None if it would not start."""
    try:
        perf = start_perf(shape or engine_shape(measurement.config, measurement.deployment),
                          measurement.deployment, profile, cpu_kvcache_space_gib)
    except EngineStartError:
        return None
    return replay(perf, measurement.trace, measurement.rate_scale, measurement.seed)


def relative_errors(measurements: Sequence[Measurement], profile: Profile,
                    metrics: Sequence[str] = tuple(TARGETS),
                    slowdowns: Sequence[float] | None = None) -> dict[str, float]:
    """Mean |predicted / measured - 1| per metric (inf where the simulator would not start);
    each replay predicted on a host `slowdowns[i]` times slower than the profile's."""
    errs: dict[str, list[float]] = {k: [] for k in (*metrics, *STEP_METRICS)}
    for m, slowdown in zip(measurements, slowdowns or [1.0] * len(measurements), strict=True):
        profile_then = profile.slowed(slowdown)
        pred = predict(m, profile_then)
        for k in metrics:
            obs = m.observed.get(k)
            if obs is None or not math.isfinite(obs) or obs <= 0:
                continue
            value = getattr(pred, k) if pred is not None else float("nan")
            errs[k].append(abs(value / obs - 1) if math.isfinite(value) else float("inf"))
        for metric, pairs in step_pairs_ms(m, profile_then).items():
            errs[metric] += [abs(p / o - 1) for p, o in pairs]
    # A step metric no replay timed is left out; a target metric none measured is nan.
    return {k: float(np.mean(v)) if v else float("nan") for k, v in errs.items()
            if v or k not in STEP_METRICS}


def step_pairs_ms(m: Measurement, profile: Profile, shape: EngineShape | None = None
                  ) -> dict[str, list[tuple[float, float]]]:
    """(modelled, measured) step milliseconds the replay timed, by STEP_METRICS kind: decode
    steps one pair per batch size; prefill steps one per prompt-length bin (its median
    measured step, and that times the median modelled / measured ratio). Kinds the replay has
    no timings of are left out."""
    if not m.step_times:
        return {}
    shape = shape or engine_shape(m.config, m.deployment)
    decode = [s for s in m.step_times if not s.prompt_tokens]
    prefill = sorted(usable_prefill_steps(m, shape), key=lambda s: s.prompt_tokens)
    try:
        perf = PerfModel(m.deployment.gpu_info, m.deployment.model_info, shape, profile)
    except (EngineStartError, StartFailure):  # an engine that would not start has no steps
        perf = None

    def modelled_ms(s: StepTime) -> float:
        if perf is None:
            return float("inf")
        p = s.prompt_tokens
        return perf.step_s(s.batch, s.kv_tokens, p, 1 if p else 0, p * p / 2) * 1000.0

    found = {}
    if decode:
        found[STEP_METRICS[0]] = [(modelled_ms(s), s.step_ms) for s in decode]
    bins = min(PREFILL_BINS, len(prefill) // MIN_PREFILL_STEPS)
    if bins:
        found[STEP_METRICS[1]] = []
        for part in np.array_split(np.arange(len(prefill)), bins):
            measured = np.array([prefill[i].step_ms for i in part])
            ratio = np.array([modelled_ms(prefill[i]) for i in part]) / measured
            middle = float(np.median(measured))
            found[STEP_METRICS[1]].append((middle * float(np.median(ratio)), middle))
    return found


def usable_prefill_steps(m: Measurement, shape: EngineShape) -> list[StepTime]:
    """The replay's prefill steps that computed a whole prompt: within the token budget beside
    the step's decodes (a longer prompt was split, and the step timed only its last chunk) and
    the long-prefill threshold; none where prefix caching may have skipped part of a prompt (a
    trace with shared prefixes)."""
    if shape.enable_prefix_caching and any(m.trace.hash_ids):
        return []
    limit = shape.long_prefill_token_threshold or shape.max_num_batched_tokens
    return [s for s in m.step_times if s.prompt_tokens
            and s.prompt_tokens + s.batch <= shape.max_num_batched_tokens
            and s.prompt_tokens <= limit]


def loss_of(measurements: Sequence[Measurement], profile: Profile) -> float:
    """The loss `calibrate` minimises, for one profile as it is (noise off)."""
    cases = [_Case(m, engine_shape(m.config, m.deployment)) for m in measurements]
    return _loss(cases, profile.with_coefficients(noise_cv=0.0))


def _loss(cases: Sequence[_Case], profile: Profile) -> float:
    """Mean weighted squared log error of the predictions over the measured metrics."""
    total, count = 0.0, 0
    for case in cases:
        profile_then = profile.slowed(case.slowdown)
        pred = predict(case.measurement, profile_then, shape=case.shape)
        for metric, weight in TARGETS.items():
            obs = case.measurement.observed.get(metric)
            if obs is None or not math.isfinite(obs) or obs <= 0:
                continue
            value = getattr(pred, metric) if pred is not None else float("nan")
            total += weight * _log_err(value, obs) ** 2
            count += 1
        for pairs in step_pairs_ms(case.measurement, profile_then, case.shape).values():
            # one term per replay and kind, the mean over its batch sizes or bins
            total += STEP_WEIGHT * sum(_log_err(p, o) ** 2 for p, o in pairs) / len(pairs)
            count += 1
    return total / max(count, 1)


def _log_err(value: float, observed: float) -> float:
    return math.log(value / observed) if math.isfinite(value) and value > 0 else 10.0


def calibrate(measurements: Sequence[Measurement], base: Profile, *,
              coefficients: Sequence[str] = FIT_COEFFICIENTS, max_evals: int = 300,
              source: str = "", slowdowns: Sequence[float] | None = None
              ) -> tuple[Profile, dict[str, float], dict[str, float], int]:
    """Fit `coefficients` of `base` to the measurements. Returns the fitted profile, the mean
    relative errors before and after, and the number of loss evaluations.

    With `slowdowns`, measurement i ran on a host slowdowns[i] times slower than the one the
    fitted profile is for (Profile.slowed): the fit is then for the host at speed 1."""
    if not measurements:
        raise ConfigError("nothing to calibrate against: no measured replays")
    kinds = {(m.deployment.gpu_info.name, m.deployment.model_info.name) for m in measurements}
    if len(kinds) > 1:
        raise ConfigError("calibration needs measurements of one GPU and model; got "
                          + ", ".join(f"{g}/{m}" for g, m in sorted(kinds)))
    quiet = base.with_coefficients(noise_cv=0.0)
    slowdowns = list(slowdowns or [1.0] * len(measurements))
    if len(slowdowns) != len(measurements) or min(slowdowns) <= 0:
        raise ConfigError("calibration needs one positive slowdown per measurement")
    cases = [_Case(m, engine_shape(m.config, m.deployment), f)
             for m, f in zip(measurements, slowdowns, strict=True)]
    start = asdict(base.coefficients)
    x0 = np.log([max(start[c], _FLOOR) if start[c] else _ZERO_START.get(c, _FLOOR)
                 for c in coefficients])

    # Efficiencies are shares of a datasheet figure: never above 1. The `cpu` device has no
    # datasheet: its figures are a placeholder for whatever host runs the CPU build, and hosts
    # differ several-fold (docs/benchmarks/simulator-fidelity.md).
    datasheet = measurements[0].deployment.gpu_info.device == "gpu"

    def profile_at(x: np.ndarray) -> Profile:
        values = {c: float(math.exp(v)) for c, v in zip(coefficients, x, strict=True)}
        if datasheet:
            for c in ("hbm_efficiency", "compute_efficiency"):
                if c in values:
                    values[c] = min(values[c], 1.0)
            if "attention_efficiency" in values:  # attention, too, within the datasheet
                fitted = quiet.with_coefficients(**values).coefficients
                values["attention_efficiency"] = min(
                    values["attention_efficiency"],
                    1.0 / max(fitted.hbm_efficiency, fitted.compute_efficiency))
        return quiet.with_coefficients(**values)

    def loss(x: np.ndarray) -> float:
        return _loss(cases, profile_at(x))

    loss_before = loss(x0)
    # Nelder-Mead: the loss is a simulation, with no gradient. The first simplex steps 0.7 in
    # log space (x2 a coefficient) so that the fit explores past small local wiggles.
    fit = scipy.optimize.minimize(loss, x0, method="Nelder-Mead", options={
        "maxfev": max_evals, "initial_simplex": [x0, *(x0 + 0.7 * np.eye(len(x0)))],
        "xatol": 1e-3, "fatol": 1e-6})
    x, evals = fit.x, int(fit.nfev)
    loss_after = loss(x)
    fitted = profile_at(x).with_coefficients(noise_cv=base.coefficients.noise_cv)
    before = relative_errors(measurements, quiet, slowdowns=slowdowns)
    after = relative_errors(measurements, fitted.with_coefficients(noise_cv=0.0),
                            slowdowns=slowdowns)
    fitted = Profile(gpu=base.gpu, model=base.model, version=base.version,
                     source=source or f"calibrated from {len(measurements)} measured replays",
                     coefficients=fitted.coefficients,
                     fit={"measurements": len(measurements), "evaluations": evals,
                          "coefficients_fitted": list(coefficients),
                          "loss_before": loss_before, "loss_after": loss_after,
                          "mean_relative_error_before": before,
                          "mean_relative_error_after": after})
    return fitted, before, after, evals
