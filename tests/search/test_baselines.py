from __future__ import annotations

from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.vllm_defaults import effective_values
from autotune.search.baselines import guide_heuristic, vllm_defaults


def dep(gpu: str, profile: str = "chat") -> DeploymentSpec:
    return DeploymentSpec(name="d", model="Llama-3.1-8B", gpu=gpu, gpu_count=1,
                          tensor_parallel_size=1, max_model_len=8192, traffic_profile=profile)


def test_vllm_defaults_follow_the_hardware() -> None:
    h200 = vllm_defaults(DEMO)
    assert (h200.max_num_seqs, h200.max_num_batched_tokens) == (1024, 8192)
    # vLLM picks a block size by its attention backend; DeepSeek-V4's are pinned (rules.yaml)
    assert vllm_defaults(dep("H200-141GB")).block_size is None
    assert (h200.block_size, h200.kv_cache_dtype) == (256, "fp8")
    a100 = vllm_defaults(dep("A100-80GB"))
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    cpu = vllm_defaults(dep("cpu"))
    assert (cpu.max_num_seqs, cpu.max_num_batched_tokens) == (128, 2048)
    assert h200.gpu_memory_utilization == 0.92 and h200.enable_chunked_prefill


def test_vllm_picks_the_block_size_and_overrides_v4s_cache_dtype() -> None:
    v4 = effective_values(vllm_defaults(DEMO), DEMO)
    # DeepSeek-V4's kernels take only 256-token blocks; "auto" becomes its fp8 layout.
    assert (v4["block_size"], v4["kv_cache_dtype"]) == (256, "fp8_ds_mla")
    llama = effective_values(vllm_defaults(dep("H200-141GB")), dep("H200-141GB"))
    assert (llama["block_size"], llama["kv_cache_dtype"]) == (64, "auto")
    assert effective_values(vllm_defaults(dep("cpu")), dep("cpu"))["block_size"] == 128
    asked = effective_values(vllm_defaults(DEMO).merged(block_size=512), DEMO)
    assert asked["block_size"] == 512  # an explicit size is the engine's


def test_guide_heuristic_decision_tree() -> None:
    a100 = guide_heuristic(dep("A100-80GB"))
    assert (a100.max_num_batched_tokens, a100.gpu_memory_utilization, a100.max_num_seqs) == (
        4096, 0.9, 64)
    l40s = guide_heuristic(dep("L40S", "batch"))
    assert (l40s.max_num_batched_tokens, l40s.gpu_memory_utilization, l40s.max_num_seqs) == (
        2048, 0.8, 32)
    assert l40s.block_size == 32 and l40s.enable_chunked_prefill
