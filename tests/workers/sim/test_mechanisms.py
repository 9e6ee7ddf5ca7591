"""Each simulator mechanism against a case computed by hand (jitter off)."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.records import ReplayResult
from autotune.errors import EngineStartError
from autotune.search.baselines import vllm_defaults
from autotune.traffic.formats import load_trace
from autotune.traffic.trace import Trace
from autotune.workers.sim.backend import SimulatorBackend
from autotune.workers.sim.perf import PerfModel, StartFailure
from autotune.workers.sim.profile import find_profile
from autotune.workers.sim.scheduler import simulate
from autotune.workers.sim.shape import engine_shape
from tests.conftest import public_trace

TINY = DeploymentSpec(name="t", model="tiny-llama", gpu="cpu", gpu_count=1,
                      tensor_parallel_size=1, max_model_len=256)
L40S = DeploymentSpec(name="l", model="Llama-3.1-8B", gpu="L40S", gpu_count=1,
                      tensor_parallel_size=1, max_model_len=16384)
KIB = 1024


def perf_for(dep: DeploymentSpec, kv_space_gib: float = 1.0, **args: object) -> PerfModel:
    shape = engine_shape(EngineConfig(**args), dep)  # type: ignore[arg-type]
    gpu = dep.gpu_info
    profile = find_profile(gpu.name, dep.model_info.name, gpu.device, None).with_coefficients(
        noise_cv=0.0)
    return PerfModel(gpu, dep.model_info, shape, profile, cpu_kvcache_space_gib=kv_space_gib)


def run(perf: PerfModel, rows: list[dict[str, object]], scale: float = 1.0) -> ReplayResult:
    trace = Trace.from_rows("hand", rows)
    return simulate(perf, trace.arrival_s / scale, trace.prompt_tokens, trace.output_tokens,
                    trace.hash_ids, trace.hash_block_tokens, np.random.default_rng(0), 1e6)


def test_block_count_comes_from_the_kv_space_and_the_layout() -> None:
    # tiny-llama: 2 layers x (K and V) x 2 KV heads x 64 dims x 2 bytes = 1 KiB per token.
    perf = perf_for(TINY, block_size=32)
    assert perf.layout.bytes_per_token == 1 * KIB
    assert perf.num_blocks == (1 << 30) // (32 * KIB)


@pytest.mark.parametrize("block_size, blocks_each", [(32, 2), (64, 1), (128, 1)])
def test_the_last_block_of_a_sequence_is_partly_empty(block_size: int, blocks_each: int) -> None:
    # Four 40-token prompts with 10 output tokens: 50 tokens need ceil(50 / block_size) blocks.
    perf = perf_for(TINY, block_size=block_size)
    rows = [{"arrival_s": 0.0, "prompt_tokens": 40, "output_tokens": 10} for _ in range(4)]
    stats = run(perf, rows).engine_stats
    assert stats["kv_cache_usage_peak"] == pytest.approx(4 * blocks_each / perf.num_blocks)


def test_an_oversubscribed_cache_preempts_the_newest_request() -> None:
    # 12 blocks of 32 tokens: three 100-token prompts take 4 blocks each, all of them. The
    # 129th token of each needs a fifth block: the newest (the third) is evicted for it.
    perf = perf_for(TINY, block_size=32)
    rows = [{"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 100} for _ in range(3)]
    roomy = run(perf, rows)
    tight_perf = perf_for(TINY, kv_space_gib=12 * 32 * KIB / 2**30, block_size=32)
    assert tight_perf.num_blocks == 12
    tight = run(tight_perf, rows)
    assert roomy.engine_stats["preemptions"] == 0
    assert tight.engine_stats["preemptions"] >= 1
    assert not tight.failed.any() and (tight.output_tokens == 100).all()
    # The first request is never evicted, the third is evicted first: it finishes last.
    assert tight.e2e_s[0] == pytest.approx(roomy.e2e_s[0], rel=0.05)
    assert tight.e2e_s[2] > tight.e2e_s[1] > tight.e2e_s[0]
    assert tight.engine_stats["kv_cache_usage_peak"] == 1.0


def test_chunked_prefill_splits_a_long_prompt_over_the_token_budget() -> None:
    perf = perf_for(L40S, max_num_batched_tokens=2048, max_num_seqs=8)
    ttft = run(perf, [{"arrival_s": 0.0, "prompt_tokens": 5000, "output_tokens": 2}]).ttft_s[0]
    chunks = [(0, 2048), (2048, 2048), (4096, 904)]  # (context before, chunk)
    expected = sum(perf.step_s(0, 0, c, 1, c * (ctx + c / 2)) for ctx, c in chunks)
    assert ttft == pytest.approx(expected, rel=1e-12)


def test_long_prefill_token_threshold_caps_a_requests_chunk_beside_another() -> None:
    perf = perf_for(L40S, max_num_batched_tokens=2048, long_prefill_token_threshold=512)
    both = [{"arrival_s": 0.0, "prompt_tokens": 1500, "output_tokens": 2} for _ in range(2)]
    chunks = [(0, 512), (512, 512), (1024, 476)]  # each request's, side by side in each step
    expected = sum(perf.step_s(0, 0, 2 * c, 2, 2 * c * (ctx + c / 2)) for ctx, c in chunks)
    assert run(perf, both).ttft_s.tolist() == pytest.approx([expected] * 2, rel=1e-12)
    # Alone it starves nobody: vLLM 0.32 lifts the cap, and the prompt takes one step.
    alone = run(perf, both[:1]).ttft_s[0]
    assert alone == pytest.approx(perf.step_s(0, 0, 1500, 1, 1500 * 750), rel=1e-12)


def test_without_chunked_prefill_a_prompt_waits_for_a_whole_budget() -> None:
    rows = [{"arrival_s": 0.0, "prompt_tokens": 1500, "output_tokens": 3} for _ in range(2)]
    chunked = perf_for(L40S, max_num_batched_tokens=16384, enable_chunked_prefill=True)
    whole = perf_for(L40S, max_num_batched_tokens=16384, enable_chunked_prefill=False)
    # Both fit one 16384-token step: the two prompts are prefilled together either way.
    together = chunked.step_s(0, 0, 3000, 2, 2 * 1500 * 750)
    assert run(chunked, rows).ttft_s[1] == pytest.approx(together, rel=1e-12)
    assert run(whole, rows).ttft_s[1] == pytest.approx(together, rel=1e-12)
    small = DeploymentSpec(name="s", model="Llama-3.1-8B", gpu="L40S", gpu_count=1,
                           tensor_parallel_size=1, max_model_len=2048)
    chunked = perf_for(small, max_num_batched_tokens=2048, enable_chunked_prefill=True)
    whole = perf_for(small, max_num_batched_tokens=2048, enable_chunked_prefill=False)
    # A 2048 budget: chunked fills the first step with 1500 + 548; whole admits one prompt.
    first = chunked.step_s(0, 0, 2048, 2, 1500 * 750 + 548 * 274)
    second = chunked.step_s(1, 1500, 952, 1, 952 * (548 + 476))
    assert run(chunked, rows).ttft_s[1] == pytest.approx(first + second, rel=1e-12)
    alone = whole.step_s(0, 0, 1500, 1, 1500 * 750)
    beside = whole.step_s(1, 1500, 1500, 1, 1500 * 750)
    assert run(whole, rows).ttft_s[1] == pytest.approx(alone + beside, rel=1e-12)


def _hit_rate_by_hand(trace: Trace, block_size: int) -> float:
    """Requests one at a time, every earlier prompt's full hashed blocks cached: the hit is the
    longest cached run of leading hashes, in whole engine blocks, never the last token."""
    seen: set[int] = set()
    hits = queried = 0
    for prompt, hashes in zip(trace.prompt_tokens, trace.hash_ids, strict=True):
        run_len = 0
        while run_len < len(hashes) and hashes[run_len] in seen:
            run_len += 1
        hit = min(run_len * trace.hash_block_tokens // block_size * block_size, int(prompt) - 1)
        hits, queried = hits + (hit if run_len else 0), queried + int(prompt)
        seen.update(hashes[:min(len(hashes), int(prompt) // trace.hash_block_tokens)])
    return hits / queried


def test_prefix_hit_rate_on_the_mooncake_hashes_matches_a_hand_count() -> None:
    trace = load_trace(public_trace("mooncake_synthetic.jsonl")).slice(0, 600)
    dep = DeploymentSpec(name="m", model="DeepSeek-V4-Flash", gpu="H200-141GB", gpu_count=8,
                         tensor_parallel_size=8, max_model_len=262144)
    perf = perf_for(dep, kv_cache_dtype="fp8")
    stats = run(perf, trace.to_rows(), scale=0.01).engine_stats  # one request at a time
    assert stats["preemptions"] == 0
    expected = _hit_rate_by_hand(trace, perf.block_size)
    assert expected > 0.05  # sharing is there: the check is not vacuous
    assert stats["prefix_cache_hit_rate"] == pytest.approx(expected, rel=1e-9)


def test_prefix_cache_hits_share_memory_and_skip_prefill() -> None:
    perf = perf_for(L40S, max_num_batched_tokens=8192)
    shared = list(range(8))  # 8 blocks of 512 tokens in common
    rows = [{"arrival_s": 0.0, "prompt_tokens": 4200, "output_tokens": 50, "hash_ids": shared,
             "hash_block_tokens": 512},
            {"arrival_s": 5.0, "prompt_tokens": 4200, "output_tokens": 50,
             "hash_ids": [*shared], "hash_block_tokens": 512}]
    result = run(perf, rows)
    assert result.engine_stats["prefix_cache_hit_rate"] == pytest.approx(4096 / 8400)
    # The second computes only the 104 tokens after the cached 4096.
    assert result.ttft_s[1] == pytest.approx(perf.step_s(0, 0, 104, 1, 104 * (4096 + 52)),
                                             rel=1e-12)


def test_an_overlong_request_is_refused_like_vllm_answers_400() -> None:
    perf = perf_for(TINY)
    result = run(perf, [{"arrival_s": 0.0, "prompt_tokens": 250, "output_tokens": 10},
                        {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 10}])
    assert result.failed.tolist() == [True, False]
    assert result.engine_stats["refused_requests"] == 1


@pytest.mark.parametrize("utilization, message", [
    (0.40, "larger than the available KV cache memory"),  # ~1.5 GiB: under 16384 tokens
    (0.34, "No available memory for the cache blocks"),  # less than the weights
    (0.99, "less than desired GPU memory utilization"),
])
def test_an_engine_short_of_memory_fails_to_start_as_oom(utilization: float, message: str) -> None:
    with pytest.raises(StartFailure, match=message) as info:
        perf_for(L40S, gpu_memory_utilization=utilization)
    assert info.value.failure_class == "oom"
    backend = SimulatorBackend()
    with pytest.raises(EngineStartError) as start:
        backend.start(EngineConfig(gpu_memory_utilization=utilization), L40S)
    assert start.value.failure_class == "oom"


def test_the_block_size_is_the_engines_and_one_vllm_refuses_is_refused() -> None:
    # vLLM pages in --block-size as given (a backend that cannot take it is skipped): no
    # rounding to a kernel multiple.
    dep = DeploymentSpec(name="v3", model="DeepSeek-V3", gpu="H200-141GB", gpu_count=8,
                         tensor_parallel_size=8, max_model_len=16384)
    assert perf_for(dep, block_size=16).block_size == 16
    assert perf_for(L40S, block_size=16).block_size == 16
    # DeepSeek-V4's kernels take only multiples of 256: a start with 64 fails as vLLM's does.
    with pytest.raises(EngineStartError, match=r"No common block size.*rule dsv4_block_size"):
        SimulatorBackend().start(vllm_defaults(DEMO).merged(block_size=64), DEMO)
    assert perf_for(DEMO, block_size=512).block_size == 512


def test_decode_batches_pad_to_cuda_graph_sizes() -> None:
    dep = DeploymentSpec(name="v3", model="DeepSeek-V3", gpu="H200-141GB", gpu_count=8,
                         tensor_parallel_size=8, max_model_len=16384)
    perf = perf_for(dep, max_num_seqs=256)
    assert perf.graphs[:5] == (1, 2, 4, 8, 16) and perf.graphs[-1] == 512
    # 8 sequences fill a captured size; a ninth pads the batch to 16, whose padded tokens touch
    # more experts; a tenth costs little more.
    jump = perf.step_s(9, 9 * 1000) - perf.step_s(8, 8 * 1000)
    step = perf.step_s(10, 10 * 1000) - perf.step_s(9, 9 * 1000)
    assert jump > 2 * step
    eager = perf_for(dep, max_num_seqs=256, enforce_eager=True)
    assert eager.graphs == ()
    assert eager.step_s(8, 8 * 1000) > perf.step_s(8, 8 * 1000)  # kernel launches per layer
    assert perf.memory_breakdown_gib()["cuda_graphs"] > 0
    assert eager.memory_breakdown_gib()["cuda_graphs"] == 0
