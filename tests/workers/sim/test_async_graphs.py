"""Async scheduling, CUDA-graph capture sizes and the engine features the simulator refuses,
each against a case computed by hand from the profile's coefficients (jitter off)."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.vllm_defaults import effective_values
from autotune.errors import EngineStartError
from autotune.search.spaces.deployment import SIM_UNMODELLED
from autotune.workers.sim.backend import SimulatorBackend
from autotune.workers.sim.engine import replay_closed_loop
from autotune.workers.sim.perf import PerfModel
from autotune.workers.sim.profile import Profile, find_profile
from autotune.workers.sim.scheduler import simulate
from autotune.workers.sim.shape import engine_shape

H200 = DeploymentSpec(name="h", model="Llama-3.1-8B", gpu="H200-141GB", gpu_count=1,
                      tensor_parallel_size=1, max_model_len=8192)
TINY = DeploymentSpec(name="t", model="tiny-llama", gpu="cpu", gpu_count=1,
                      tensor_parallel_size=1, max_model_len=256)


def profile_for(dep: DeploymentSpec, **coefficients: float) -> Profile:
    gpu = dep.gpu_info
    return find_profile(gpu.name, dep.model_info.name, gpu.device, None).with_coefficients(
        noise_cv=0.0, **coefficients)


def perf_for(dep: DeploymentSpec, profile: Profile | None = None, **args: object) -> PerfModel:
    values: dict[str, object] = {"max_num_seqs": 256, "max_num_batched_tokens": 8192, **args}
    shape = engine_shape(EngineConfig(**values), dep)  # type: ignore[arg-type]
    return PerfModel(dep.gpu_info, dep.model_info, shape, profile or profile_for(dep))


def test_vllm_resolves_async_scheduling_on_for_gpus_and_off_for_the_cpu_build() -> None:
    assert effective_values(EngineConfig(), H200)["async_scheduling"] is True
    assert effective_values(EngineConfig(async_scheduling=False), H200)["async_scheduling"] is False
    # The CPU platform turns it off whatever is asked.
    assert effective_values(EngineConfig(async_scheduling=True), TINY)["async_scheduling"] is False
    ngram = {"method": "ngram", "num_speculative_tokens": 2}
    assert effective_values(EngineConfig(speculative_config=ngram), H200)["async_scheduling"] is False


def test_async_scheduling_hides_the_cpu_share_of_a_gpu_bound_step() -> None:
    c = profile_for(H200).coefficients
    sync, overlap = perf_for(H200, async_scheduling=False), perf_for(H200, async_scheduling=True)
    gpu, cpu = sync.step_parts_s(8, 8 * 1000)
    assert cpu == pytest.approx(c.cpu_step_s + 8 * c.cpu_seq_s)
    assert gpu > cpu  # an 8B model's weights take longer to read than the engine core's work
    assert sync.step_s(8, 8 * 1000) == pytest.approx(gpu + cpu)
    assert overlap.step_s(8, 8 * 1000) == pytest.approx(gpu)
    assert sync.step_s(8, 8 * 1000) - overlap.step_s(8, 8 * 1000) == pytest.approx(
        c.cpu_step_s + 8 * c.cpu_seq_s)


def test_async_scheduling_leaves_a_cpu_bound_step_at_its_cpu_time() -> None:
    slow_cpu = profile_for(H200, cpu_step_s=0.5)
    c = slow_cpu.coefficients
    overlap = perf_for(H200, slow_cpu, async_scheduling=True)
    assert overlap.step_s(8, 8 * 1000) == pytest.approx(0.5 + 8 * c.cpu_seq_s)


def test_the_cpu_build_never_overlaps() -> None:
    perf = perf_for(TINY, block_size=128, max_num_batched_tokens=2048, async_scheduling=True)
    gpu, cpu = perf.step_parts_s(4, 400)
    assert perf.step_s(4, 400) == pytest.approx(gpu + cpu)


def test_decode_runs_stay_exact_where_the_gpu_overtakes_the_cpu() -> None:
    """The fast path evaluates decode runs as affine pieces; with async scheduling a step is
    max(GPU, CPU), so the kink where the growing attention overtakes the CPU must be a cut."""
    seqs, kv, steps = 64, 64 * 500.0, 4000
    probe = perf_for(H200, async_scheduling=False)
    mid_gpu, _ = probe.step_parts_s(seqs, kv + seqs * steps / 2)
    # A CPU share equal to the GPU's halfway through the run: the kink falls inside it.
    profile = profile_for(H200, cpu_step_s=mid_gpu - seqs * probe.profile.coefficients.cpu_seq_s)
    perf = perf_for(H200, profile, async_scheduling=True)
    pieces = perf.decode_segments(seqs, kv, steps)
    assert len(pieces) >= 2
    for first, end, a, b in pieces:
        for j in (first, (first + end) // 2, end - 1):
            assert a + b * (j - first) == pytest.approx(perf.step_s(seqs, kv + seqs * j),
                                                        rel=1e-9)


def test_batches_above_the_capture_size_pay_eager_launches() -> None:
    c = profile_for(H200).coefficients
    layers = H200.model_info.num_layers
    small = perf_for(H200, async_scheduling=False, max_cudagraph_capture_size=64)
    large = perf_for(H200, async_scheduling=False, max_cudagraph_capture_size=512)
    assert small.graphs[-1] == 64 and large.graphs[-1] == 512
    assert small.step_s(64, 64 * 1000) == pytest.approx(large.step_s(64, 64 * 1000))
    # 72 sequences: on the grid of 8 in `large` (no padding); above the capture in `small`.
    assert small.step_s(72, 72 * 1000) - large.step_s(72, 72 * 1000) == pytest.approx(
        c.eager_layer_s * layers)


def test_capture_size_is_capped_by_the_step_budget_and_costs_graph_memory() -> None:
    c = profile_for(H200).coefficients
    capped = perf_for(H200, max_cudagraph_capture_size=2048, max_num_batched_tokens=8192,
                      enable_chunked_prefill=True)
    assert capped.graphs[-1] == 2048
    capped = perf_for(H200, max_cudagraph_capture_size=2048, max_num_batched_tokens=1024,
                      enable_chunked_prefill=True)
    assert capped.graphs[-1] == 1024
    small = perf_for(H200, max_cudagraph_capture_size=256)
    large = perf_for(H200, max_cudagraph_capture_size=1024)
    grow = large.memory_breakdown_gib()["cuda_graphs"] - small.memory_breakdown_gib()["cuda_graphs"]
    assert grow == pytest.approx(c.cuda_graph_gib_per_512_seqs * (1024 - 256) / 512)
    assert large.num_blocks < small.num_blocks
    # vLLM's default: min(2 x max_num_seqs, 512).
    assert perf_for(H200, max_num_seqs=64).graphs[-1] == 128
    assert perf_for(H200, enforce_eager=True, max_cudagraph_capture_size=256).graphs == ()


UNMODELLED = [
    ({"pipeline_parallel_size": 2}, "does not model pipeline parallelism"),
    ({"speculative_config": {"method": "mtp", "num_speculative_tokens": 1}},
     "does not model speculative decoding"),
]


def test_the_spaces_refuse_to_search_on_the_simulator_what_it_refuses_to_run() -> None:
    # autotune.search.spaces.deployment keeps its own list (the core does not import the
    # workers): the same one.
    assert sorted(SIM_UNMODELLED) == sorted(name for args, _ in UNMODELLED for name in args)


@pytest.mark.parametrize("args, message", UNMODELLED)
def test_features_without_a_model_are_refused(args: dict, message: str) -> None:
    dep = H200.model_copy(update={"gpu_count": 2})
    with pytest.raises(EngineStartError, match=message) as info:
        SimulatorBackend().start(EngineConfig(**args), dep)
    assert info.value.failure_class == "invalid_args"


@pytest.mark.parametrize("skip_decode_runs", [True, False])
def test_async_scheduling_admits_an_arrival_one_step_later(skip_decode_runs: bool) -> None:
    """vLLM schedules step k+1 while step k runs (EngineCore.step_with_batch_queue), so a
    request arriving during a busy engine's step joins the step after next. With the CPU's
    share set to 0 both modes step at the same times until the arrival is admitted: the async
    engine admits it exactly one single-sequence decode step later. An idle engine admits at
    once either way."""
    profile = profile_for(H200, cpu_step_s=0.0, cpu_seq_s=0.0)
    arrival = np.array([0.0, 0.05])  # the second arrives while the first decodes
    prompts, outputs = np.array([512, 512]), np.array([400, 8])
    admitted = {}
    for mode in (False, True):
        perf = perf_for(H200, profile, async_scheduling=mode)
        result = simulate(perf, arrival, prompts, outputs, ((), ()), 16,
                          np.random.default_rng(0), 60.0, skip_decode_runs=skip_decode_runs)
        assert result.queue_s[0] == 0.0  # idle engine: scheduled on arrival
        admitted[mode] = arrival[1] + result.queue_s[1]
    lag = admitted[True] - admitted[False]
    lo, hi = (perf.step_s(1, kv) for kv in (512, 912))  # one sequence's decode step
    assert lo * (1 - 1e-9) <= lag <= hi * (1 + 1e-9)


def test_async_lag_needs_a_running_batch_to_carry_over() -> None:
    """One client: its next request reaches an engine with nothing running (the last one
    finished), which schedules it at once, so async scheduling leaves TTFT as it was."""
    profile = profile_for(H200, cpu_step_s=0.0, cpu_seq_s=0.0)
    ttft = {}
    for mode in (False, True):
        perf = perf_for(H200, profile, async_scheduling=mode)
        ttft[mode] = replay_closed_loop(perf, np.full(6, 512), np.full(6, 32), 1, 0).ttft_s
    np.testing.assert_allclose(ttft[True], ttft[False], rtol=1e-12)
