"""Calibration recovers the coefficients that produced a set of measurements."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import Measurement
from autotune.domain.step_timings import StepTime
from autotune.errors import ConfigError
from autotune.traffic.trace import Trace
from autotune.workers.sim.calibrate import (
    FIT_COEFFICIENTS,
    calibrate,
    predict,
    relative_errors,
    step_pairs_ms,
    usable_prefill_steps,
)
from autotune.workers.sim.perf import PerfModel
from autotune.workers.sim.profile import Profile, find_profile
from autotune.workers.sim.shape import engine_shape

pytestmark = pytest.mark.e2e  # the CLI as a process, or whole campaigns: not the fast tier

TINY = DeploymentSpec(name="t", model="tiny-llama", gpu="cpu", gpu_count=1,
                      tensor_parallel_size=1, max_model_len=2048)


def _trace() -> Trace:
    rng = np.random.default_rng(1)
    rows = [{"arrival_s": float(t), "prompt_tokens": int(p), "output_tokens": int(o)}
            for t, p, o in zip(np.cumsum(rng.exponential(0.2, 60)), rng.integers(50, 900, 60),
                               rng.integers(16, 96, 60), strict=True)]
    return Trace.from_rows("cal", rows)


def test_calibration_recovers_the_profile_that_made_the_measurements() -> None:
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    truth = base.with_coefficients(cpu_step_s=base.coefficients.cpu_step_s * 2.5,
                                   cpu_seq_s=base.coefficients.cpu_seq_s * 0.4,
                                   cpu_prefill_token_s=base.coefficients.cpu_prefill_token_s * 3)
    trace = _trace()
    measurements = []
    for seqs in (4, 16, 64):
        for scale in (1.0, 6.0):
            m = Measurement(config=EngineConfig(max_num_seqs=seqs), deployment=TINY, trace=trace,
                            rate_scale=scale, seed=0, observed={})
            summary = predict(m, truth)
            assert summary is not None
            measurements.append(Measurement(
                config=m.config, deployment=TINY, trace=trace, rate_scale=scale, seed=0,
                observed={k: getattr(summary, k) for k in
                          ("output_tok_s", "tpot_p50_ms", "ttft_p50_ms", "ttft_p99_ms")}))
    fitted, before, after, evals = calibrate(measurements, base, max_evals=250)
    assert max(before.values()) > 0.3  # the default profile is far off: the fit has work to do
    assert max(after.values()) < 0.05
    assert evals <= 260
    assert fitted.fit is not None and fitted.fit["measurements"] == 6
    got = fitted.coefficients
    assert got.cpu_step_s == pytest.approx(truth.coefficients.cpu_step_s, rel=0.15)
    assert relative_errors(measurements, fitted.with_coefficients(noise_cv=0.0))["tpot_p50_ms"] < 0.05


def test_calibration_refuses_nothing_or_mixed_hardware() -> None:
    base = find_profile("cpu", "tiny-llama", "cpu", None)
    with pytest.raises(ConfigError, match="nothing to calibrate"):
        calibrate([], base)
    trace = _trace()
    other = TINY.model_copy(update={"model": "Llama-3.1-8B"})
    ms = [Measurement(config=EngineConfig(), deployment=d, trace=trace, rate_scale=1.0, seed=0,
                      observed={"output_tok_s": 1.0}) for d in (TINY, other)]
    with pytest.raises(ConfigError, match="one GPU and model"):
        calibrate(ms, base)


def _measured_by(truth: object, deployment: DeploymentSpec) -> list[Measurement]:
    trace, out = _trace(), []
    for seqs in (4, 64):
        for scale in (1.0, 6.0):
            m = Measurement(config=EngineConfig(max_num_seqs=seqs), deployment=deployment,
                            trace=trace, rate_scale=scale, seed=0, observed={})
            summary = predict(m, truth)  # type: ignore[arg-type]
            assert summary is not None
            out.append(replace(m, observed={k: getattr(summary, k) for k in (
                "output_tok_s", "tpot_p50_ms", "ttft_p50_ms", "ttft_p99_ms")}))
    return out


def test_a_cpu_host_faster_than_the_placeholder_figures_is_fitted() -> None:
    """The `cpu` device's bandwidth and FLOPs are placeholders, not a datasheet: a host with
    matrix units beats them, and the fit must be free to say so (efficiency above 1)."""
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(
        noise_cv=0.0, hbm_efficiency=1.0, compute_efficiency=1.0)
    truth = base.with_coefficients(hbm_efficiency=3.0, compute_efficiency=3.0)
    measured = _measured_by(truth, TINY)
    fitted, before, after, _ = calibrate(measured, base, max_evals=250)
    assert max(before.values()) > 0.3
    assert max(after.values()) < 0.1
    assert max(fitted.coefficients.hbm_efficiency, fitted.coefficients.compute_efficiency) > 1.5


def test_gpu_efficiencies_stay_shares_of_the_datasheet() -> None:
    gpu = DeploymentSpec(name="g", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=1,
                         tensor_parallel_size=1, max_model_len=4096)
    base = find_profile("H100-80GB", "Llama-3.1-8B", "gpu", None).with_coefficients(noise_cv=0.0)
    truth = base.with_coefficients(hbm_efficiency=1.0, compute_efficiency=1.0,
                                   cpu_step_s=base.coefficients.cpu_step_s / 4)
    fitted, _, _, _ = calibrate(_measured_by(truth, gpu), base, max_evals=60)
    got = fitted.coefficients
    assert got.hbm_efficiency <= 1.0 and got.compute_efficiency <= 1.0
    assert got.attention_efficiency * max(got.hbm_efficiency, got.compute_efficiency) <= 1.0001


def _steps_of(truth: object, m: Measurement) -> tuple[StepTime, ...]:
    """The decode step timings a real replay would carry, made by the truth's step model at the
    fidelity trace's mean context (about 550 tokens a sequence)."""
    perf = PerfModel(m.deployment.gpu_info, m.deployment.model_info,
                     engine_shape(m.config, m.deployment), truth)  # type: ignore[arg-type]
    return tuple(StepTime(batch=b, kv_tokens=550.0 * b, step_ms=perf.step_s(b, 550.0 * b) * 1e3,
                             gaps=100) for b in (1, 2, 4, 8, 16) if b <= m.config.max_num_seqs)


def test_step_timings_pin_the_fixed_and_the_per_sequence_cost() -> None:
    """An engine whose attention is dear and whose fixed step cost is small (the CPU build on a
    2-core AVX-512 host, against a replay-only fit). Throughput alone is matched by many step
    models; the decode step timings pick the one the engine has."""
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    c = base.coefficients
    truth = base.with_coefficients(cpu_step_s=c.cpu_step_s * 0.5, attention_efficiency=0.2,
                                   cpu_seq_s=c.cpu_seq_s * 2)
    throughput_only = [replace(m, observed={"output_tok_s": m.observed["output_tok_s"]})
                       for m in _measured_by(truth, TINY)]
    with_steps = [replace(m, step_times=_steps_of(truth, m)) for m in throughput_only]
    blind, _, _, _ = calibrate(throughput_only, base, max_evals=300)
    fitted, before, after, _ = calibrate(with_steps, base, max_evals=300)
    assert before["decode_step_ms"] > 0.2
    assert after["decode_step_ms"] < 0.05 and after["output_tok_s"] < 0.05
    assert fitted.coefficients.cpu_step_s == pytest.approx(truth.coefficients.cpu_step_s, rel=0.2)
    assert relative_errors(with_steps, blind)["decode_step_ms"] > 0.1  # the replays alone miss
    assert fitted.fit is not None
    assert fitted.fit["mean_relative_error_after"]["decode_step_ms"] == after["decode_step_ms"]


def test_a_step_concave_in_its_batch_is_fitted_at_batch_one_too() -> None:
    """The CPU build's first few sequences of a step cost more than the later ones (run 17:
    0.24 ms each from batch 1 to 4, 0.12-0.13 after). An affine per-sequence cost fits the
    batches on average and misses the one-sequence step; the small-batch surcharge fits it."""
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    truth = base.with_coefficients(cpu_small_batch_seq_s=3e-4)
    measured = [replace(m, step_times=_steps_of(truth, m)) for m in _measured_by(truth, TINY)]
    affine = tuple(k for k in FIT_COEFFICIENTS if k != "cpu_small_batch_seq_s")
    fitted, _, after, _ = calibrate(measured, base, max_evals=300)
    plain, _, _, _ = calibrate(measured, base, coefficients=affine, max_evals=300)

    def lone_step_err(profile: Profile) -> float:
        (modelled, real), *_ = step_pairs_ms(measured[0], profile)["decode_step_ms"]  # batch 1
        return abs(modelled / real - 1)

    assert after["decode_step_ms"] < 0.02 and lone_step_err(fitted) < 0.02
    assert lone_step_err(plain) > 0.05
    assert fitted.coefficients.cpu_small_batch_seq_s == pytest.approx(3e-4, rel=0.25)


def test_replays_without_step_timings_report_no_step_error() -> None:
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    assert "decode_step_ms" not in relative_errors(_measured_by(base, TINY)[:1], base)


def test_the_frontend_adds_to_every_ttft_and_to_nothing_between_tokens() -> None:
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    m = Measurement(config=EngineConfig(max_num_seqs=8), deployment=TINY, trace=_trace(),
                    rate_scale=2.0, seed=0, observed={})
    plain, slow = predict(m, base), predict(m, base.with_coefficients(frontend_s=3e-3))
    assert plain is not None and slow is not None
    for metric in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms"):
        assert getattr(slow, metric) == pytest.approx(getattr(plain, metric) + 3.0)
    assert slow.tpot_p50_ms == pytest.approx(plain.tpot_p50_ms)
    assert slow.itl_p99_ms == plain.itl_p99_ms


def test_calibration_finds_the_frontends_share_of_ttft() -> None:
    """A frontend of 4 ms (HTTP and the API server on a 2-core host) in every TTFT: the fit
    finds it from the latencies instead of making prefill dearer."""
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    truth = base.with_coefficients(frontend_s=4e-3)
    fitted, before, after, _ = calibrate(_measured_by(truth, TINY), base, max_evals=400)
    assert before["ttft_p50_ms"] > 0.1 and after["ttft_p50_ms"] < 0.03
    assert fitted.coefficients.frontend_s == pytest.approx(4e-3, rel=0.25)


def _prefill_steps_of(truth: object, m: Measurement) -> tuple[StepTime, ...]:
    """Prefill steps a real replay would carry: 20 prompts of 64-760 tokens, each in a step
    beside two decodes, timed by the truth's step model."""
    perf = PerfModel(m.deployment.gpu_info, m.deployment.model_info,
                     engine_shape(m.config, m.deployment), truth)  # type: ignore[arg-type]
    return tuple(StepTime(batch=2, kv_tokens=1100.0, gaps=2, prompt_tokens=int(p),
                          step_ms=perf.step_s(2, 1100.0, int(p), 1, int(p) ** 2 / 2) * 1e3)
                 for p in np.linspace(64, 760, 20))


def test_prefill_step_timings_split_ttft_between_prefill_and_the_frontend() -> None:
    """TTFT is the frontend's way plus the prefill: from latencies alone a fit can trade one
    for the other (on a 2-core host one put 1.5 ms in the frontend where the engine's lone
    prompts showed 6-7, and made prefill a third too dear). The prefill steps pin the split."""
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    truth = base.with_coefficients(frontend_s=6e-3,
                                   cpu_prefill_token_s=base.coefficients.cpu_prefill_token_s / 3)
    # One replay's median TTFT: one figure for two unknowns.
    latency_only = [replace(m, observed={"ttft_p50_ms": m.observed["ttft_p50_ms"]})
                    for m in _measured_by(truth, TINY)[:1]]
    with_steps = [replace(m, step_times=_prefill_steps_of(truth, m)) for m in latency_only]
    fit = ("cpu_prefill_token_s", "frontend_s")
    blind, _, _, _ = calibrate(latency_only, base, coefficients=fit, max_evals=200)
    fitted, before, after, _ = calibrate(with_steps, base, coefficients=fit, max_evals=200)
    assert before["prefill_step_ms"] > 0.2 and after["prefill_step_ms"] < 0.03
    assert after["ttft_p50_ms"] < 0.03
    assert fitted.coefficients.frontend_s == pytest.approx(6e-3, rel=0.1)
    assert relative_errors(with_steps, blind)["prefill_step_ms"] > 0.1  # latencies alone miss
    assert abs(blind.coefficients.frontend_s / 6e-3 - 1) > 0.25


def test_prefill_steps_of_split_or_cached_prompts_are_not_judged() -> None:
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    m = replace(_measured_by(base, TINY)[0], config=EngineConfig(
        max_num_seqs=4, max_num_batched_tokens=256))
    m = replace(m, step_times=_prefill_steps_of(base, m))
    shape = engine_shape(m.config, m.deployment)
    # 254 prompt tokens fit beside two decodes; longer prompts were split by the budget.
    assert [s.prompt_tokens for s in usable_prefill_steps(m, shape)] == [
        s.prompt_tokens for s in m.step_times if s.prompt_tokens <= 254]
    shared = Trace.from_rows("shared", [{"arrival_s": 0.0, "prompt_tokens": 64,
                                         "output_tokens": 8, "hash_ids": [1, 2]}])
    assert usable_prefill_steps(replace(m, trace=shared), shape) == []
    no_cache = replace(shape, enable_prefix_caching=False)
    assert usable_prefill_steps(replace(m, trace=shared), no_cache) != []


def test_a_host_twice_as_slow_takes_twice_as_long_for_every_step() -> None:
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(
        noise_cv=0.0, frontend_s=2e-3)
    # All requests at once (arrival gaps a ten-thousandth of the trace's): nothing but the
    # engine's speed sets the timings.
    m = Measurement(config=EngineConfig(max_num_seqs=16), deployment=TINY, trace=_trace(),
                    rate_scale=1e4, seed=0, observed={})
    plain, slow = predict(m, base), predict(m, base.slowed(2.0))
    assert plain is not None and slow is not None
    assert slow.output_tok_s == pytest.approx(plain.output_tok_s / 2, rel=0.01)
    for metric in ("tpot_p50_ms", "ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms"):
        assert getattr(slow, metric) == pytest.approx(2 * getattr(plain, metric), rel=0.01)
    assert base.slowed(1.0) is base


def test_calibration_at_each_replays_host_speed_fits_the_host_at_speed_one() -> None:
    """Replays on a host whose speed drifted (half of them 1.6x slower): told each one's
    slowdown, the fit finds the profile that made them; not told, no profile explains both."""
    base = find_profile("cpu", "tiny-llama", "cpu", None).with_coefficients(noise_cv=0.0)
    truth = base.with_coefficients(cpu_step_s=base.coefficients.cpu_step_s * 2)
    slowdowns = [1.0, 1.6, 1.6, 1.0]
    measured = []
    for m, f in zip(_measured_by(truth, TINY), slowdowns, strict=True):
        summary = predict(m, truth.slowed(f))
        assert summary is not None
        measured.append(replace(m, observed={k: getattr(summary, k) for k in m.observed}))
    told, _, after_told, _ = calibrate(measured, base, max_evals=250, slowdowns=slowdowns)
    _, _, after_blind, _ = calibrate(measured, base, max_evals=250)
    assert max(after_told.values()) < 0.05 < max(after_blind.values())
    assert told.coefficients.cpu_step_s == pytest.approx(truth.coefficients.cpu_step_s, rel=0.15)
    with pytest.raises(ConfigError, match="one positive slowdown per measurement"):
        calibrate(measured, base, slowdowns=[1.0])
