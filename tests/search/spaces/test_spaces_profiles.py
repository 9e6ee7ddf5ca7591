"""The built-in spaces: chosen by traffic profile, bound to the hardware, baselines inside."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.cli.flags import flag_message
from autotune.domain.deployment import DEMO, DeploymentSpec
from autotune.domain.engine_config import EngineConfig
from autotune.errors import SearchSpaceError
from autotune.search.baselines import baseline_configs
from autotune.search.spaces.deployment import (
    check_searchable,
    deployment_space,
    load_search_space,
    space_name_for,
    space_params,
)

DENSE = DeploymentSpec(name="dense", model="Llama-3.1-8B", gpu="H100-80GB", gpu_count=8,
                       tensor_parallel_size=8, max_model_len=8192, traffic_profile="batch")
SMALL_GPU = DeploymentSpec(name="l40", model="Llama-3.1-8B", gpu="L40S", gpu_count=1,
                           tensor_parallel_size=1, max_model_len=4096)
CPU = DeploymentSpec(name="cpu", model="tiny-llama", gpu="cpu", gpu_count=1,
                     tensor_parallel_size=1, max_model_len=2048)


def test_the_traffic_profile_picks_the_space_unless_one_is_given() -> None:
    assert space_name_for(DEMO, None) == "chat" and space_name_for(DENSE, None) == "batch"
    assert space_name_for(DENSE, "default") == "default"
    assert load_search_space("chat").profile == "chat"
    assert load_search_space("batch").profile == "batch"


def test_batch_reaches_bigger_batches_than_chat() -> None:
    chat, batch = deployment_space("chat", DENSE), deployment_space("batch", DENSE)
    assert max(batch.param("max_num_seqs").choices) > max(chat.param("max_num_seqs").choices)
    assert (max(batch.param("max_num_batched_tokens").choices)
            > max(chat.param("max_num_batched_tokens").choices))


def test_bounds_come_from_memory_and_context() -> None:
    big, small = deployment_space("chat", DEMO), deployment_space("chat", SMALL_GPU)
    assert max(big.param("max_num_seqs").choices) == 1024  # 140 GiB
    assert max(small.param("max_num_seqs").choices) == 512  # 45 GiB
    # the long-prefill cap never exceeds half the context
    assert max(small.param("long_prefill_token_threshold").choices) == 2048
    assert max(big.param("long_prefill_token_threshold").choices) == 4096
    assert max(small.param("max_num_batched_tokens").choices) == 16384


def test_the_parallel_layouts_are_those_of_all_the_gpus_the_model_allows() -> None:
    dense, moe = deployment_space("chat", DENSE), deployment_space("chat", DEMO)
    # A dense model: TP over all eight GPUs or DP x TP replicas; no expert parallelism.
    assert dense.param("parallelism").choices == ("TP8", "DP2xTP4", "DP4xTP2", "DP8")
    # An MoE model: TP, TP+EP and data-parallel attention with EP (DEP), never DP without EP.
    assert moe.param("parallelism").choices == ("TP8", "TP8+EP", "DP2xTP4+EP", "DP4xTP2+EP",
                                                "DP8+EP")
    assert "parallelism" not in deployment_space("chat", SMALL_GPU).param_names  # one GPU
    cpu, gpu = deployment_space("chat", CPU), deployment_space("chat", DENSE)
    assert not cpu.is_active(cpu.param("kv_cache_dtype"), {})  # no fp8 KV on the CPU build
    assert gpu.is_active(gpu.param("kv_cache_dtype"), {})


def test_a_value_the_model_requires_is_pinned_not_searched() -> None:
    v4 = deployment_space("chat", DEMO)
    assert dict(v4.pinned) == {"block_size": 256, "kv_cache_dtype": "fp8"}
    assert "block_size" not in v4.param_names and "kv_cache_dtype" not in v4.param_names
    assert deployment_space("chat", DENSE).pinned == {}
    # Baselines and trials run with the pins (vLLM would refuse the guide's block 32).
    configs = baseline_configs(DEMO)
    assert {c.block_size for c in configs.values()} == {256}
    assert set(configs) == {"vllm-default", "guide-heuristic", "vllm-recipe"}
    assert configs["vllm-recipe"].enable_expert_parallel
    assert "vllm-recipe" not in baseline_configs(CPU)  # no recipe for the tiny model


@pytest.mark.parametrize("space", ["chat", "batch", "default", "chat-speculative"])
@pytest.mark.parametrize("dep", [DEMO, DENSE, SMALL_GPU, CPU], ids=lambda d: d.name)
def test_every_baseline_lies_inside_every_builtin_space(space: str, dep: DeploymentSpec) -> None:
    bound = deployment_space(space, dep)
    configs = baseline_configs(dep)
    assert configs
    for role, config in configs.items():
        params = space_params(bound, config, dep)
        assert params, role


@pytest.mark.parametrize("arg, reason", [
    ("preemption_mode", "always preempts by recompute"),
    ("swap_space", "no CPU swap space"),
    ("max_num_partial_prefills", "partial-prefill limits were removed"),
    ("max_long_partial_prefills", "partial-prefill limits were removed"),
])
def test_removed_args_in_a_space_are_refused_with_the_reason(tmp_path: Path, arg: str,
                                                             reason: str) -> None:
    path = tmp_path / "old.yaml"
    path.write_text(f"parameters:\n  {arg}: {{type: categorical, choices: [1, 2]}}\n")
    with pytest.raises(SearchSpaceError, match=f"{arg}' no longer exists in vLLM.*{reason}"):
        load_search_space(str(path))


def test_speculative_decoding_only_on_gpus_for_models_with_mtp_layers() -> None:
    moe, dense, cpu = (deployment_space("chat-speculative", d) for d in (DEMO, DENSE, CPU))
    assert moe.is_active(moe.param("speculative_config"), {})  # DeepSeek-V4-Flash ships MTP
    assert not dense.is_active(dense.param("speculative_config"), {})  # Llama does not
    assert not cpu.is_active(cpu.param("speculative_config"), {})
    assert "speculative_config" not in load_search_space("chat").param_names  # opt-in only


def test_a_speculative_config_maps_to_its_choice_and_back() -> None:
    space = deployment_space("chat-speculative", DEMO)
    choice = space.param("speculative_config").choices[2]
    config = EngineConfig(max_model_len=4096).merged(speculative_config=choice)
    assert config.explicit()["speculative_config"] == {"method": "mtp",
                                                       "num_speculative_tokens": 2}
    assert space_params(space, config, DEMO)["speculative_config"] == choice
    # No drafting is a choice too, so every baseline can be enqueued.
    assert space_params(space, EngineConfig(max_model_len=4096), DEMO)["speculative_config"] is None


def test_a_space_the_simulator_cannot_run_is_refused_for_it() -> None:
    space = deployment_space("chat-speculative", DEMO)
    with pytest.raises(SearchSpaceError, match="simulator does not model.*engines .backend vllm") as info:
        check_searchable(space, "sim")
    assert "(--backend vllm)" in flag_message(info.value)
    check_searchable(space, "vllm")
    # Where the deployment switches drafting off, the space is plain chat: fine to simulate.
    check_searchable(deployment_space("chat-speculative", CPU), "sim")
