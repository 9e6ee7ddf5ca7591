"""The capacity search on the simulator: ladder, bisection, SLO, client-bound replays."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.domain.deployment import DEMO
from autotune.domain.records import CapacitySearch, ReplayResult
from autotune.domain.slo import parse_slo
from autotune.measure.capacity import run_trial
from autotune.measure.trial_spec import TrialSpec
from autotune.search.baselines import guide_heuristic
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE, Trace
from autotune.workers.sim.backend import SimulatorBackend


def spec(slo: str, search: CapacitySearch | None = None) -> TrialSpec:
    return TrialSpec(study_name="s", trial_number=7, config=guide_heuristic(DEMO).merged(
        max_num_seqs=256, max_num_batched_tokens=8192), deployment=DEMO, trace=load_trace(DEMO_TRACE),
        slo=parse_slo(slo), backend="sim", search=search or CapacitySearch())


def test_capacity_is_the_highest_rate_within_the_slo() -> None:
    outcome = run_trial(spec("ttft_p99<=2s,tpot_p99<=50ms"), SimulatorBackend())
    assert outcome.failure_class is None and outcome.capacity_rate_scale > 1
    ok = [r for r in outcome.replays if r["slo_ok"]]
    missed = [r for r in outcome.replays if not r["slo_ok"]]
    assert outcome.capacity_rate_scale in {r["rate_scale"] for r in ok}
    assert min(r["rate_scale"] for r in missed) > outcome.capacity_rate_scale
    assert outcome.at_capacity is not None and outcome.at_capacity.ttft_p99_ms <= 2000
    assert outcome.at_capacity.goodput_request_s is not None
    passing = [r["output_tok_s"] for r in outcome.replays if r["slo_ok"]]
    assert outcome.capacity_output_tok_s == max(passing)


def test_each_replay_keeps_its_percentiles_and_the_load_it_was_offered() -> None:
    s = spec("ttft_p99<=2s,tpot_p99<=50ms")
    outcome = run_trial(s, SimulatorBackend())
    recorded_rate = len(s.trace) / s.trace.duration_s  # requests/s, as `traffic show` says
    for r in outcome.replays:
        assert r["offered_request_s"] == pytest.approx(recorded_rate * r["rate_scale"])
        for m in ("ttft", "tpot", "e2e"):
            assert r[f"{m}_p50_ms"] <= r[f"{m}_p90_ms"] <= r[f"{m}_p99_ms"], (m, r)
        assert 0 < r["mean_concurrent_requests"] <= r["max_concurrent_requests"]
        assert r["request_s"] > 0
    # Exactly one replay is the capacity, and only it keeps its latency distribution.
    at = [r for r in outcome.replays if r.get("at_capacity")]
    assert len(at) == 1 and [r for r in outcome.replays if "quantiles" in r] == at
    at_capacity, summary = at[0], outcome.at_capacity
    assert summary is not None
    assert (at_capacity["rate_scale"], at_capacity["output_tok_s"]) == (
        outcome.capacity_rate_scale, outcome.capacity_output_tok_s)
    q = at_capacity["quantiles"]
    p50, p99 = q["pcts"].index(50.0), q["pcts"].index(99.0)
    assert q["ttft_ms"][p50] == pytest.approx(summary.ttft_p50_ms)
    assert q["tpot_ms"][p99] == pytest.approx(summary.tpot_p99_ms)
    assert q["e2e_ms"][p99] == pytest.approx(at_capacity["e2e_p99_ms"])
    assert q["e2e_ms"] == sorted(q["e2e_ms"])


def test_tighter_slo_means_less_capacity() -> None:
    loose = run_trial(spec("ttft_p99<=2s"), SimulatorBackend())
    tight = run_trial(spec("ttft_p99<=100ms"), SimulatorBackend())
    assert tight.capacity_output_tok_s < loose.capacity_output_tok_s


def test_missing_the_slo_at_the_recorded_rate_is_no_capacity() -> None:
    outcome = run_trial(spec("ttft_p99<=1ms"), SimulatorBackend())
    assert outcome.failure_class == "slo_miss" and outcome.capacity_output_tok_s == 0
    assert outcome.at_recorded_rate is not None and len(outcome.replays) == 1


def test_max_scale_caps_the_ladder() -> None:
    outcome = run_trial(spec("ttft_p99<=60s", CapacitySearch(max_scale=4)), SimulatorBackend())
    assert outcome.capacity_rate_scale == 4 and [r["rate_scale"] for r in outcome.replays] == [1, 2, 4]


class _LateClient(SimulatorBackend):
    """The simulator, with every request leaving the client 20 ms late."""

    def replay(self, trace: object, rate_scale: float, seed: int) -> ReplayResult:
        r = super().replay(trace, rate_scale, seed)
        return ReplayResult(**{**r.__dict__, "send_lag_s": np.full(len(r.scheduled_s), 0.02)})


def test_a_client_bound_replay_is_not_a_measurement() -> None:
    outcome = run_trial(spec("ttft_p99<=2s"), _LateClient())
    assert outcome.failure_class == "client_bound" and outcome.at_recorded_rate is None
    assert outcome.replays[0]["client_bound"] is True
    relaxed = run_trial(spec("ttft_p99<=2s", CapacitySearch(max_send_lag_p99_ms=50)), _LateClient())
    assert relaxed.failure_class is None


class _Recording(SimulatorBackend):
    """The simulator, remembering what each replay offered: (multiplier, requests, span s)."""

    def __init__(self) -> None:
        super().__init__()
        self.offered: list[tuple[float, int, float]] = []

    def replay(self, trace: object, rate_scale: float, seed: int) -> ReplayResult:
        assert isinstance(trace, Trace)
        self.offered.append((rate_scale, len(trace), trace.duration_s / rate_scale))
        return super().replay(trace, rate_scale, seed)


def test_a_window_offers_the_same_length_of_traffic_at_every_multiplier() -> None:
    trace = load_trace(DEMO_TRACE)
    window = trace.duration_s / 64
    backend = _Recording()
    outcome = run_trial(spec("ttft_p99<=2s,tpot_p99<=50ms", CapacitySearch(window_s=window)),
                        backend)
    assert outcome.failure_class is None and len(backend.offered) > 3
    for scale, requests, span in backend.offered:
        assert 0.8 * window <= span <= window, (scale, span)  # up to the next arrival
        assert requests < len(trace) or scale >= 64  # a head of the trace below x64
    # More traffic at a higher multiplier: the same seconds, more requests in them.
    by_scale = sorted(backend.offered)
    assert [r for _, r, _ in by_scale] == sorted(r for _, r, _ in by_scale)


def test_a_window_stops_the_ladder_where_the_trace_no_longer_covers_it() -> None:
    trace = load_trace(DEMO_TRACE)
    search = CapacitySearch(window_s=trace.duration_s / 4, bisect_steps=0)
    assert search.ladder(trace.duration_s) == [1, 2, 4]
    outcome = run_trial(spec("ttft_p99<=60s", search), SimulatorBackend())
    assert [r["rate_scale"] for r in outcome.replays] == [1, 2, 4]
    assert CapacitySearch().ladder(trace.duration_s)[-1] == 1024  # no window: max_scale
