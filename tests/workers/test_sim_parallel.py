"""Data parallelism in the simulator: independent replicas, refused for MoE models."""

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


def test_data_parallel_moe_is_refused_not_guessed() -> None:
    with pytest.raises(EngineStartError, match="independent replicas"):
        SimulatorBackend().start(vllm_defaults(DEMO).merged(data_parallel_size=2,
                                                            tensor_parallel_size=4), DEMO)
