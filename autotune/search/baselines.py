"""Reference configs: what vLLM picks by itself (vllm_defaults, from search/spaces/pinned.py:
the spaces' rules judge layouts on it), what the tuning guide recommends, and what vLLM's recipe
for the model and GPU runs (where one exists).

They are enqueued before the sampler proposes anything, so every campaign reports its gain
over them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

import yaml

from autotune.domain.deployment import DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.domain.vllm_defaults import deployment_args, effective_values
from autotune.search.spaces.pinned import pinned_values, vllm_defaults
from autotune.vocabulary import Role


def guide_heuristic(dep: DeploymentSpec) -> EngineConfig:
    """The practitioners' tuning guide's decision tree, as autotune's heuristic baseline."""
    g = dep.gpu_info
    return EngineConfig(**{
        **deployment_args(dep),
        "enable_chunked_prefill": True,
        "block_size": 32,
        "max_num_batched_tokens": 4096 if g.a100_class else 2048,
        "gpu_memory_utilization": 0.9 if g.memory_gib >= 80 else 0.8,
        "max_num_seqs": 64 if dep.traffic_profile == "chat" else 32,
        "enable_prefix_caching": True,
        **pinned_values(dep),  # the guide's block size where the model's kernels allow it
    })


@cache
def _recipes() -> list[dict[str, Any]]:
    text = resources.files("autotune").joinpath("data/recipes.yaml").read_text()
    return list(yaml.safe_load(text)["recipes"])


def recipe(dep: DeploymentSpec) -> dict[str, Any] | None:
    """vLLM's recipe entry for the deployment's model, GPU and GPU count, if it has one."""
    for entry in _recipes():
        if (entry["model"] == dep.model_info.name and dep.gpu_info.name in entry["gpus"]
                and entry["gpu_count"] == dep.gpu_count):
            return entry
    return None


def vllm_recipe(dep: DeploymentSpec) -> EngineConfig | None:
    """The recipe's engine arguments that autotune tunes (the context length stays the
    deployment's); None where vLLM has no recipe for this model on these GPUs."""
    entry = recipe(dep)
    if entry is None:
        return None
    return EngineConfig(**{**entry["args"], "max_model_len": dep.max_model_len,
                           **pinned_values(dep)})


BASELINES: dict[str, Callable[[DeploymentSpec], EngineConfig | None]] = {
    Role.VLLM_DEFAULT: vllm_defaults, Role.GUIDE_HEURISTIC: guide_heuristic,
    Role.VLLM_RECIPE: vllm_recipe}


def baseline_configs(dep: DeploymentSpec) -> dict[str, EngineConfig]:
    """The deployment's baselines: vLLM's recipe only where one exists, and only where it is
    not what an earlier baseline runs (Llama-3.1-8B's recipe is vLLM's defaults): two trials
    of one config in flight at once would both be measured."""
    out: dict[str, EngineConfig] = {}
    seen: list[dict[str, Any]] = []
    for role, make in BASELINES.items():
        config = make(dep)
        if config is None or (effective := effective_values(config, dep)) in seen:
            continue
        seen.append(effective)
        out[role] = config
    return out
