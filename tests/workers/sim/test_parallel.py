"""Data parallelism in the simulator: independent ranks behind a least-loaded front end for
dense models; for MoE models data-parallel attention with expert parallelism (DEP), whose ranks
share the experts and step in lockstep."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.records import ReplayResult
from autotune.errors import EngineStartError
from autotune.measure.metrics import summarize
from autotune.search.baselines import vllm_defaults
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import DEMO_TRACE, Trace
from autotune.workers.sim.backend import SimulatorBackend
from autotune.workers.sim.perf import PerfModel, RankBatch
from autotune.workers.sim.scheduler import simulate, simulate_data_parallel

TRACE = load_trace(DEMO_TRACE).slice(0, 200)


def _dep(gpus: int) -> DeploymentSpec:
    return DeploymentSpec(name="d", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=gpus,
                          tensor_parallel_size=1, max_model_len=8192)


def _replay(dp: int, scale: float):  # type: ignore[no-untyped-def]
    dep = _dep(dp)
    backend = SimulatorBackend()
    backend.start(vllm_defaults(dep).merged(data_parallel_size=dp), dep)
    return backend.replay(TRACE, scale, 0)


def test_replicas_split_the_load() -> None:
    one, two = _replay(1, 40.0), _replay(2, 40.0)
    assert len(two.e2e_s) == len(TRACE) and not two.failed.any()
    # Each replica sees half the requests: queueing and batch sizes fall, so latency does.
    assert summarize(two).e2e_p50_ms < summarize(one).e2e_p50_ms
    # Every request's tokens arrive, in request order.
    assert (two.output_tokens == TRACE.output_tokens).all()


def test_more_gpus_than_the_deployment_has_fails_to_start() -> None:
    dep = _dep(2)
    with pytest.raises(EngineStartError, match="needs 4 GPUs"):
        SimulatorBackend().start(vllm_defaults(dep).merged(data_parallel_size=4), dep)


def test_data_parallel_moe_without_expert_parallelism_is_refused_not_guessed() -> None:
    with pytest.raises(EngineStartError, match=r"expert parallelism \(DEP\) only"):
        SimulatorBackend().start(vllm_defaults(DEMO).merged(
            data_parallel_size=2, tensor_parallel_size=4, enable_expert_parallel=False), DEMO)


def _dep_perf(tp: int, dp: int, ep: bool):  # type: ignore[no-untyped-def]
    # The roofline's DEP mechanics (test_sim_measured.py covers the measured tables' lockstep).
    backend = SimulatorBackend(step_model="roofline")
    backend.start(vllm_defaults(DEMO).merged(tensor_parallel_size=tp, data_parallel_size=dp,
                                             enable_expert_parallel=ep), DEMO)
    return backend


def test_dep_replicates_attention_and_shares_the_experts() -> None:
    tp8, tep8, dep8 = _dep_perf(8, 1, False), _dep_perf(8, 1, True), _dep_perf(1, 8, True)
    gib = lambda b: b.perf.memory_breakdown_gib()["weights"]  # noqa: E731
    # Experts are split eight ways in all three; DEP holds the dense weights whole on each rank.
    assert gib(tp8) == pytest.approx(gib(tep8)) and gib(dep8) > gib(tp8)
    # V4's latent KV cache is replicated on every TP rank but private to each DP rank: DEP's
    # eight ranks together hold several times the tokens of TP8's one shared cache.
    assert 8 * dep8.perf.num_blocks > 3 * tp8.perf.num_blocks
    # A DEP rank's MoE layers serve every rank's tokens (lockstep): its decode step of 8
    # sequences touches the experts of 64 tokens, and gathers the other ranks' tokens.
    assert dep8.perf.moe_token_factor == 8 and tep8.perf.moe_token_factor == 1
    lone = SimulatorBackend(step_model="roofline")
    lone.start(vllm_defaults(DEMO).merged(tensor_parallel_size=1, data_parallel_size=8,
                                          enable_expert_parallel=True), DEMO)
    lone.perf.moe_token_factor = 1  # the same rank if the other ranks had no tokens
    assert dep8.perf.step_s(8, 8 * 2000) > lone.perf.step_s(8, 8 * 2000)


def test_a_dep_replay_completes_every_request_in_order() -> None:
    backend = _dep_perf(2, 4, True)
    result = backend.replay(TRACE, 4.0, 0)
    assert not result.failed.any() and (result.output_tokens == TRACE.output_tokens).all()


def _run(perf: PerfModel, ranks: int, lockstep: bool, trace: Trace, scale: float,
         skip_decode_runs: bool = True) -> ReplayResult:
    return simulate_data_parallel(
        perf, ranks, lockstep, trace.arrival_s / scale, trace.prompt_tokens, trace.output_tokens,
        trace.hash_ids, trace.hash_block_tokens, np.random.default_rng(0), 1e6,
        skip_decode_runs=skip_decode_runs)


def _close(a: ReplayResult, b: ReplayResult) -> None:
    for name in ("ttft_s", "e2e_s", "queue_s"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-9, atol=1e-9)
    assert (a.output_tokens == b.output_tokens).all()
    # The same inter-token gaps with the same weights (runs are stored as arrays, steps one by one).
    order_a, order_b = np.argsort(a.itl_s, kind="stable"), np.argsort(b.itl_s, kind="stable")
    assert a.itl_weight.sum() == b.itl_weight.sum()
    np.testing.assert_allclose(np.repeat(a.itl_s[order_a], a.itl_weight[order_a]),
                               np.repeat(b.itl_s[order_b], b.itl_weight[order_b]), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(("tp", "dp", "scale"), [(1, 8, 1.0), (2, 4, 4.0)])
def test_lockstep_decode_runs_match_stepping_one_step_at_a_time(tp: int, dp: int,
                                                                scale: float) -> None:
    perf = _dep_perf(tp, dp, True).perf
    fast, stepped = _run(perf, dp, True, TRACE, scale), _run(perf, dp, True, TRACE, scale, False)
    assert not fast.failed.any()
    _close(fast, stepped)


def test_independent_ranks_decode_runs_match_stepping() -> None:
    dep = _dep(4)
    backend = SimulatorBackend()
    backend.start(vllm_defaults(dep).merged(data_parallel_size=4), dep)
    _close(_run(backend.perf, 4, False, TRACE, 40.0), _run(backend.perf, 4, False, TRACE, 40.0, False))


def test_a_burst_is_spread_evenly_over_the_ranks() -> None:
    """The front end sends each request to the least-loaded rank: 64 equal requests at once on
    four independent ranks run exactly as 16 of them on one engine, four times over."""
    n = 64
    burst = Trace.from_columns("burst", arrival_s=np.zeros(n), prompt_tokens=np.full(n, 512),
                               output_tokens=np.full(n, 64))
    dep = _dep(4)
    backend = SimulatorBackend()
    backend.start(vllm_defaults(dep).merged(data_parallel_size=4), dep)
    four = _run(backend.perf, 4, False, burst, 1.0)
    quarter = burst.slice(0, n // 4)
    one = simulate(backend.perf, quarter.arrival_s, quarter.prompt_tokens, quarter.output_tokens,
                   quarter.hash_ids, quarter.hash_block_tokens, np.random.default_rng(0), 1e6)
    assert sorted(four.e2e_s) == pytest.approx(sorted(np.tile(one.e2e_s, 4)), rel=1e-12)


def test_a_request_goes_to_the_idle_rank_not_the_next_in_turn() -> None:
    """A long request on rank 0, a short one on rank 1 that has finished when a third comes:
    round robin would put the third beside the long one; the least-loaded front end does not,
    so it runs alone, exactly as the second did."""
    trace = Trace.from_columns("turns", arrival_s=[0.0, 0.0, 5.0], prompt_tokens=[512] * 3,
                               output_tokens=[4000, 32, 32])
    dep = _dep(2)
    backend = SimulatorBackend()
    backend.start(vllm_defaults(dep).merged(data_parallel_size=2), dep)
    result = _run(backend.perf, 2, False, trace, 1.0)
    assert result.e2e_s[1] < 5.0 < result.e2e_s[0]  # the long one is still running at 5 s
    assert result.e2e_s[2] == pytest.approx(result.e2e_s[1], rel=1e-12)


def test_lockstep_ranks_wait_for_the_slowest_and_pad_to_the_largest_batch() -> None:
    perf = _dep_perf(1, 8, True).perf
    small, large = RankBatch(1, 1000, 0, 0, 0.0), RankBatch(64, 64 * 1000, 0, 0, 0.0)
    prefill = RankBatch(0, 0, 4096, 1, 4096 * 2048.0)
    alone = perf.lockstep_step_s([small] * 8)
    # A rank of one sequence beside one of 64 runs a 64-token batch: it takes as long as 64.
    assert perf.lockstep_step_s([small] * 7 + [large]) == perf.lockstep_step_s([large] * 8) > alone
    # One rank's long prefill holds up every rank's decode step.
    assert perf.lockstep_step_s([small] * 7 + [prefill]) > 5 * alone
    # Ranks without work run one-token dummy batches: they cost the others nothing more.
    assert perf.lockstep_step_s([small] + [None] * 7) == pytest.approx(alone)
    # Beyond the largest CUDA graph (512 tokens here) nobody is padded: the idle ranks' dummies
    # bring the experts one token each, not another 4096.
    assert perf.lockstep_step_s([prefill] + [None] * 7) < 0.7 * perf.lockstep_step_s([prefill] * 8)


def test_lockstep_is_never_faster_than_balanced_independent_ranks() -> None:
    """Independent ranks with each MoE step priced for DP x its own batch (the balanced-ranks
    approximation this replaced) cannot see one rank's prefill stall the others' decodes."""
    perf = _dep_perf(1, 8, True).perf
    lock, free = _run(perf, 8, True, TRACE, 4.0), _run(perf, 8, False, TRACE, 4.0)
    assert summarize(lock).tpot_p99_ms > summarize(free).tpot_p99_ms
    assert summarize(lock).e2e_p50_ms >= summarize(free).e2e_p50_ms
