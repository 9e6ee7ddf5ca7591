from __future__ import annotations

import pytest
import yaml

from autotune.engine_config import EngineConfig
from autotune.errors import ConfigError


def test_cli_args_use_vllm_flag_names_and_boolean_negation() -> None:
    config = EngineConfig(max_num_seqs=64, block_size=32, enable_chunked_prefill=False,
                          enable_prefix_caching=True, gpu_memory_utilization=0.9)
    assert config.to_cli_args() == [
        "--max-num-seqs", "64", "--block-size", "32", "--no-enable-chunked-prefill",
        "--enable-prefix-caching", "--gpu-memory-utilization", "0.9"]


def test_unset_arguments_are_left_to_vllm() -> None:
    assert EngineConfig(max_num_seqs=8).to_cli_args() == ["--max-num-seqs", "8"]
    assert EngineConfig().to_yaml().strip() == "{}"


def test_yaml_uses_kebab_case_keys_so_false_booleans_survive() -> None:
    config = EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=4096)
    assert yaml.safe_load(config.to_yaml()) == {"max-num-batched-tokens": 4096,
                                                "enable-chunked-prefill": False}


def test_float_steps_are_rounded() -> None:
    assert EngineConfig(gpu_memory_utilization=0.8799999999999999).gpu_memory_utilization == 0.88


def test_removed_argument_is_refused_with_reason() -> None:
    with pytest.raises(ConfigError, match="preemption_mode.*no longer exists.*recompute"):
        EngineConfig.from_mapping({"preemption_mode": "swap"})


def test_unknown_argument_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown engine argument 'max_seqs'"):
        EngineConfig.from_mapping({"max_seqs": 3})


def test_invalid_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        EngineConfig.from_mapping({"gpu_memory_utilization": 1.5})
