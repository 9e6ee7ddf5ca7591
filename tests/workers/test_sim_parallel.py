"""Data parallelism in the simulator: independent replicas for dense models; for MoE models
data-parallel attention with expert parallelism (DEP), whose ranks share the experts."""

from __future__ import annotations

import pytest

from autotune.baselines import vllm_defaults
from autotune.deployment import DEMO, DeploymentSpec
from autotune.errors import EngineStartError
from autotune.metrics import summarize
from autotune.traffic.trace import DEMO_TRACE, load_trace
from workers.sim.backend import SimulatorBackend

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
    backend = SimulatorBackend()
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
    lone = SimulatorBackend()
    lone.start(vllm_defaults(DEMO).merged(tensor_parallel_size=1, data_parallel_size=8,
                                          enable_expert_parallel=True), DEMO)
    lone.perf.moe_token_factor = 1  # the same rank if the other ranks had no tokens
    assert dep8.perf.step_s(8, 8 * 2000) > lone.perf.step_s(8, 8 * 2000)


def test_a_dep_replay_completes_every_request_in_order() -> None:
    backend = _dep_perf(2, 4, True)
    result = backend.replay(TRACE, 4.0, 0)
    assert not result.failed.any() and (result.output_tokens == TRACE.output_tokens).all()
