"""Closed-loop load in the simulator: N clients, each sending its next request (in order) when
its last one finished, as `vllm bench serve --max-concurrency N` does."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.records import ReplayResult
from autotune.search.baselines import vllm_defaults
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE, Trace
from autotune.workers.sim.backend import SimulatorBackend
from autotune.workers.sim.closed_loop import spread_starts
from autotune.workers.sim.engine import replay_closed_loop, replay_trace_closed_loop
from autotune.workers.sim.perf import PerfModel

DENSE = DeploymentSpec(name="d", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=2,
                       tensor_parallel_size=1, max_model_len=8192)
L40S = DeploymentSpec(name="l", model="Llama-3.1-8B", gpu="L40S", gpu_count=1,
                      tensor_parallel_size=1, max_model_len=8192)
RNG = np.random.default_rng(7)
PROMPTS, OUTPUTS = RNG.integers(50, 2500, 400), RNG.integers(5, 400, 400)


def _perf(layout: str, **engine: object) -> PerfModel:
    backend = SimulatorBackend()
    if layout == "single":
        backend.start(vllm_defaults(DEMO).merged(**engine), DEMO)
    elif layout == "dense-dp2":  # independent ranks
        backend.start(vllm_defaults(DENSE).merged(data_parallel_size=2, **engine), DENSE)
    else:  # "dep2": an MoE model's ranks in lockstep
        backend.start(vllm_defaults(DEMO).merged(tensor_parallel_size=4, data_parallel_size=2,
                                                 enable_expert_parallel=True, **engine), DEMO)
    return backend.perf


def _reply_s(perf: PerfModel) -> float:
    return perf.profile.coefficients.frontend_s


def _in_flight_at_sends(result: ReplayResult) -> np.ndarray:
    """At each send, how many requests were in flight from the client's view (sent, last
    token not yet read), counting the one just sent. A request whose last token is read at
    the send instant has freed that client (send + e2e is off by rounding: a nanosecond)."""
    send, done = result.scheduled_s, result.scheduled_s + result.e2e_s
    return np.array([int(((send <= t) & (done > t + 1e-9)).sum()) for t in send])


def _throughput(result: ReplayResult) -> float:
    return float(result.output_tokens.sum() / result.wall_s)


@pytest.mark.parametrize("layout", ["single", "dense-dp2", "dep2"])
@pytest.mark.parametrize("n", [1, 4, 32])
def test_never_more_than_n_in_flight_and_clients_stay_busy(layout: str, n: int) -> None:
    perf = _perf(layout)
    result = replay_closed_loop(perf, PROMPTS, OUTPUTS, n, 0)
    assert not result.failed.any()
    assert (result.output_tokens == OUTPUTS).all()
    assert _in_flight_at_sends(result).max() == n
    # Requests go out in order, the first n at once; each later one exactly when a client read
    # the last token of an earlier one (vLLM bench's semaphore frees on the stream's end).
    send = result.scheduled_s
    assert (np.diff(send) >= 0).all() and (send[:n] == 0).all()
    done = np.sort(send + result.e2e_s)
    assert send[n:] == pytest.approx(done[:len(send) - n], abs=1e-9)
    # TTFT counts from the actual send, so it is never below a step.
    assert (result.ttft_s > 0).all() and (result.ttft_s <= result.e2e_s).all()


@pytest.mark.parametrize("layout", ["single", "dense-dp2", "dep2"])
@pytest.mark.parametrize("n", [1, 8, 96])
def test_fast_path_equals_stepping_every_step(layout: str, n: int) -> None:
    perf = _perf(layout)
    fast = replay_closed_loop(perf, PROMPTS, OUTPUTS, n, 3)
    step = replay_closed_loop(perf, PROMPTS, OUTPUTS, n, 3, skip_decode_runs=False)
    np.testing.assert_allclose(fast.scheduled_s, step.scheduled_s, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.ttft_s, step.ttft_s, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.e2e_s, step.e2e_s, rtol=1e-9, atol=1e-9)
    assert fast.wall_s == pytest.approx(step.wall_s, rel=1e-9)
    # The same inter-token gaps, however they were grouped into runs.
    assert fast.itl_weight.sum() == step.itl_weight.sum()
    assert np.average(fast.itl_s, weights=fast.itl_weight) == pytest.approx(
        np.average(step.itl_s, weights=step.itl_weight), rel=1e-9)


def test_fast_path_equals_stepping_under_memory_pressure() -> None:
    """Few KV blocks: preemptions and runs cut by memory, with clients waiting on them."""
    backend = SimulatorBackend()
    backend.start(vllm_defaults(L40S).merged(max_num_seqs=256, max_num_batched_tokens=8192,
                                             gpu_memory_utilization=0.5), L40S)
    prompts, outputs = PROMPTS * 3, OUTPUTS * 4
    fast = replay_closed_loop(backend.perf, prompts, outputs, 256, 1)
    step = replay_closed_loop(backend.perf, prompts, outputs, 256, 1, skip_decode_runs=False)
    assert fast.engine_stats["preemptions"] > 0
    np.testing.assert_allclose(fast.e2e_s, step.e2e_s, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.scheduled_s, step.scheduled_s, rtol=1e-9, atol=1e-9)


def test_throughput_rises_with_clients_then_saturates() -> None:
    perf = _perf("single", max_num_seqs=64)
    prompts, outputs = np.full(1200, 512), np.full(1200, 256)
    tput = {n: _throughput(replay_closed_loop(perf, prompts, outputs, n, 0))
            for n in (1, 4, 16, 64, 256, 1024)}
    assert tput[1] < tput[4] < tput[16] < tput[64]
    # Past max_num_seqs the extra clients only queue: the engine runs 64 at a time either way.
    assert tput[256] == pytest.approx(tput[64], rel=0.1)
    assert tput[1024] == pytest.approx(tput[256], rel=0.1)
    assert tput[64] > 10 * tput[1]


@pytest.mark.parametrize("layout", ["single", "dep2"])
def test_littles_law_mean_in_flight_is_n(layout: str) -> None:
    """Every client always busy: requests in flight (L), throughput in requests (lambda) and
    mean time in the system (W) satisfy L = lambda W with L = N."""
    n = 24
    perf = _perf(layout)
    result = replay_closed_loop(perf, PROMPTS, OUTPUTS, n, 0)
    done = result.scheduled_s + result.e2e_s
    # Over the window in which every client is busy: from the start to the first client with
    # nothing left to send, i.e. the last send.
    end = float(result.scheduled_s[-1])
    inside = done <= end
    rate = inside.sum() / end
    mean_in_system = float(result.e2e_s[inside].mean())
    assert rate * mean_in_system == pytest.approx(n, rel=0.05)
    # Directly: the time-average of requests in flight over the window.
    grid = np.linspace(0, end, 2000, endpoint=False)
    in_flight = [((result.scheduled_s <= t) & (done > t)).sum() for t in grid]
    assert np.mean(in_flight) == pytest.approx(n, abs=0.01)


def test_a_refused_request_frees_its_client_at_once() -> None:
    perf = _perf("single")
    prompts = PROMPTS[:20].copy()
    prompts[5] = perf.shape.max_model_len  # with any output, longer than the engine serves
    result = replay_closed_loop(perf, prompts, OUTPUTS[:20], 2, 0)
    assert result.failed.sum() == 1 and result.failed[5]
    assert result.engine_stats["refused_requests"] == 1
    # Its client sent request 6 at the instant it sent request 5.
    assert result.scheduled_s[6] == result.scheduled_s[5]
    assert _in_flight_at_sends(result)[~result.failed].max() <= 2


def test_a_trace_brings_its_lengths_and_prefix_hashes() -> None:
    trace = load_trace(DEMO_TRACE).slice(0, 150)
    perf = _perf("single", enable_prefix_caching=True)
    result = replay_trace_closed_loop(perf, trace, 8, 0)
    assert (result.output_tokens == trace.output_tokens).all()
    assert result.engine_stats["prefix_cache_hit_rate"] > 0
    bare = replay_closed_loop(perf, trace.prompt_tokens, trace.output_tokens, 8, 0)
    assert bare.engine_stats["prefix_cache_hit_rate"] == 0


def test_concurrency_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        replay_closed_loop(_perf("single"), PROMPTS, OUTPUTS, 0, 0)


@pytest.mark.parametrize("layout", ["single", "dense-dp2", "dep2"])
def test_client_start_times_stagger_the_first_sends_and_desynchronise_equal_requests(
        layout: str) -> None:
    """start_s: each client's first send; with equal requests, clients that start together
    have their prompts prefilled together forever, staggered ones each on its own."""
    perf, n = _perf(layout), 4
    prompts, outputs = np.full(6 * n, 1024), np.full(6 * n, 200)
    together = replay_closed_loop(perf, prompts, outputs, n, 0)
    starts = np.arange(n) * 0.01  # well within one request's time
    spread = replay_closed_loop(perf, prompts, outputs, n, 0, start_s=starts)
    assert not spread.failed.any() and (spread.output_tokens == outputs).all()
    assert spread.scheduled_s[:n] == pytest.approx(starts)
    assert _in_flight_at_sends(spread).max() == n
    assert spread.ttft_s[2 * n:].mean() < together.ttft_s[2 * n:].mean()
    with pytest.raises(ValueError, match="start_s"):
        replay_closed_loop(perf, prompts, outputs, n, 0, start_s=np.zeros(n - 1))


@pytest.mark.parametrize("layout", ["single", "dense-dp2", "dep2"])
def test_spread_starts_cover_one_request_and_the_trace_replay_uses_them(layout: str) -> None:
    """spread_starts: the clients' first sends evenly over one request's service time (its
    output tokens' decode steps at the batch each rank holds), which the trace closed loop
    sends when asked to; together is the default."""
    perf, n = _perf(layout), 8
    prompts, outputs = np.full(4 * n, 1024), np.full(4 * n, 200)
    starts = spread_starts(perf, prompts, outputs, n)
    per_rank = -(-n // perf.shape.data_parallel_size)
    one_request_s = 200 * perf.step_s(per_rank, per_rank * (1024 + 100))
    assert starts == pytest.approx(np.arange(n) * one_request_s / n)
    trace = Trace.from_columns("equal", arrival_s=np.zeros(4 * n), prompt_tokens=prompts,
                               output_tokens=outputs)
    spread = replay_trace_closed_loop(perf, trace, n, 0, client_starts="spread")
    assert spread.scheduled_s[:n] == pytest.approx(starts)
    together = replay_trace_closed_loop(perf, trace, n, 0)
    assert (together.scheduled_s[:n] == 0).all()
    with pytest.raises(ValueError, match="client_starts='later'"):
        replay_trace_closed_loop(perf, trace, n, 0, client_starts="later")


@pytest.mark.parametrize("layout", ["single", "dense-dp2", "dep2"])
def test_a_front_end_delay_reaches_the_client_late_and_frees_it_late(layout: str) -> None:
    """With a front end (frontend_s > 0), each token reaches the client that much after its
    step, so a client sends its next request that much later; the fast path still equals
    stepping every step."""
    perf = _perf(layout)
    frontend_s = 0.004
    perf.profile = dataclasses.replace(perf.profile, coefficients=dataclasses.replace(
        perf.profile.coefficients, frontend_s=frontend_s))
    n = 8
    fast = replay_closed_loop(perf, PROMPTS, OUTPUTS, n, 3)
    step = replay_closed_loop(perf, PROMPTS, OUTPUTS, n, 3, skip_decode_runs=False)
    np.testing.assert_allclose(fast.scheduled_s, step.scheduled_s, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.e2e_s, step.e2e_s, rtol=1e-9, atol=1e-9)
    assert _in_flight_at_sends(fast).max() == n
    # Still one send per read last token, and every TTFT carries the delay on top of a step.
    done = np.sort(fast.scheduled_s + fast.e2e_s)
    assert fast.scheduled_s[n:] == pytest.approx(done[:len(done) - n], abs=1e-9)
    assert (fast.ttft_s > frontend_s).all()
    # The same load with no front end finishes sooner: the delay is in every request's cycle.
    assert _reply_s(_perf(layout)) < frontend_s
    assert replay_closed_loop(_perf(layout), PROMPTS, OUTPUTS, n, 3).wall_s < fast.wall_s
