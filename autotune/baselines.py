"""Reference configs: what vLLM picks by itself, and what the tuning guide recommends.

Both are enqueued before the sampler proposes anything, so every campaign reports its gain
over them.
"""

from __future__ import annotations

from typing import Any

from autotune.deployment import DeploymentSpec
from autotune.engine_config import EngineConfig


def deployment_args(dep: DeploymentSpec) -> dict[str, Any]:
    """Arguments fixed by the deployment rather than tuned."""
    return {"max_model_len": dep.max_model_len, "tensor_parallel_size": dep.tensor_parallel_size}


def vllm_default_values(dep: DeploymentSpec) -> dict[str, Any]:
    """The values vLLM 0.33 resolves for an OpenAI API server when an argument is not given."""
    g = dep.gpu_info
    if g.device == "cpu":
        seqs, tokens, block = 128, 2048, 128
    elif g.memory_gib >= 160:
        seqs, tokens, block = 1024, 16384, 16
    elif g.memory_gib >= 70 and not g.a100_class:
        seqs, tokens, block = 1024, 8192, 16
    else:
        seqs, tokens, block = 256, 2048, 16
    return {
        **deployment_args(dep),
        "max_num_seqs": seqs,
        "max_num_batched_tokens": tokens,
        "block_size": block,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": True,
        "gpu_memory_utilization": 0.92,
    }


# Defaults vLLM resolves the same way on every deployment; not written into the baselines'
# configs (so their command lines stay as they were), but rules and spaces see them.
IMPLICIT_DEFAULTS: dict[str, Any] = {
    "data_parallel_size": 1,
    "long_prefill_token_threshold": 0,  # no cap on one prefill's share of the step budget
    "kv_cache_dtype": "auto",
    "enforce_eager": False,  # CUDA graphs on
    "pipeline_parallel_size": 1,
    "speculative_config": None,  # no drafting
}


def resolved_async_scheduling(values: dict[str, Any], dep: DeploymentSpec) -> bool:
    """What vLLM makes of `async_scheduling` (VllmConfig's post-init, vLLM 0.33)."""
    if dep.gpu_info.device == "cpu":
        return False  # the CPU platform turns it off whatever is asked (platforms/cpu.py)
    asked = values.get("async_scheduling")
    if asked is not None:
        return bool(asked)
    spec = values.get("speculative_config")
    # CPU-side n-gram drafting has no async path: off with a warning. (Pipeline parallelism
    # turns it off only on the V1 model runner; the V2 runner, the default, keeps it on.)
    return not (spec and spec["method"] == "ngram")


def effective_values(config: EngineConfig, dep: DeploymentSpec) -> dict[str, Any]:
    """Every engine argument as the engine will see it: set ones, else vLLM's defaults."""
    values = {**IMPLICIT_DEFAULTS, **vllm_default_values(dep), **config.explicit()}
    values["async_scheduling"] = resolved_async_scheduling(values, dep)
    values["max_cudagraph_capture_size"] = resolved_max_capture_size(values, dep)
    return values


def resolved_max_capture_size(values: dict[str, Any], dep: DeploymentSpec) -> int:
    """The largest CUDA-graph capture size (tokens) vLLM 0.33 uses on a GPU: the one asked
    for, else min(2 x max_num_seqs, 512), never above max_num_batched_tokens
    (VllmConfig._set_cudagraph_sizes; 1024 is the default ceiling only on Blackwell, which the
    catalogue lacks). 0 where there are no graphs (CPU build, enforce_eager)."""
    if dep.gpu_info.device == "cpu" or values["enforce_eager"]:
        return 0
    asked = values.get("max_cudagraph_capture_size")
    size = int(asked) if asked is not None else min(2 * int(values["max_num_seqs"]), 512)
    return min(size, int(values["max_num_batched_tokens"]))


def vllm_defaults(dep: DeploymentSpec) -> EngineConfig:
    return EngineConfig(**vllm_default_values(dep))


def guide_heuristic(dep: DeploymentSpec) -> EngineConfig:
    """The tuning guide's decision tree (../shared/tuning-guide/)."""
    g = dep.gpu_info
    return EngineConfig(
        **deployment_args(dep),
        enable_chunked_prefill=True,
        block_size=32,
        max_num_batched_tokens=4096 if g.a100_class else 2048,
        gpu_memory_utilization=0.9 if g.memory_gib >= 80 else 0.8,
        max_num_seqs=64 if dep.traffic_profile == "chat" else 32,
        enable_prefix_caching=True,
    )


BASELINES = {"vllm-default": vllm_defaults, "guide-heuristic": guide_heuristic}
