from __future__ import annotations

import pytest
import yaml

from autotune.domain.engine_config import EngineConfig
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
    config = EngineConfig(enable_chunked_prefill=False, max_num_batched_tokens=4096,
                          enforce_eager=True)
    assert yaml.safe_load(config.to_yaml()) == {"max-num-batched-tokens": 4096,
                                                "no-enable-chunked-prefill": True,
                                                "enforce-eager": True}


def test_yaml_names_the_model_first() -> None:
    text = EngineConfig(max_num_seqs=8).to_yaml(model="deepseek-ai/DeepSeek-V4-Flash")
    assert text.splitlines()[0] == "model: deepseek-ai/DeepSeek-V4-Flash"
    assert yaml.safe_load(text) == {"model": "deepseek-ai/DeepSeek-V4-Flash", "max-num-seqs": 8}


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


def test_a_speculative_config_is_one_json_argument_and_a_yaml_mapping() -> None:
    config = EngineConfig.from_mapping({
        "async_scheduling": False, "max_cudagraph_capture_size": 256,
        "pipeline_parallel_size": 2,
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 2}})
    assert config.to_cli_args() == [
        "--pipeline-parallel-size", "2", "--no-async-scheduling",
        "--max-cudagraph-capture-size", "256",
        "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}']
    # Unset keys of the nested config stay unset, as top-level ones do.
    assert config.explicit()["speculative_config"] == {"method": "mtp",
                                                       "num_speculative_tokens": 2}
    assert yaml.safe_load(config.to_yaml())["speculative-config"] == {
        "method": "mtp", "num_speculative_tokens": 2}


def test_speculative_method_and_token_count_are_checked() -> None:
    with pytest.raises(ConfigError, match="speculative_config.method"):
        EngineConfig.from_mapping({"speculative_config": {"method": "medusa",
                                                          "num_speculative_tokens": 2}})
    with pytest.raises(ConfigError, match="speculative_config.num_speculative_tokens"):
        EngineConfig.from_mapping({"speculative_config": {"method": "mtp",
                                                          "num_speculative_tokens": 0}})


def test_a_speculative_config_may_come_as_vllm_json_text() -> None:
    # How a search space's categorical parameter carries it (Optuna's choices are scalars).
    text = EngineConfig.from_mapping(
        {"speculative_config": '{"method": "mtp", "num_speculative_tokens": 3}'})
    mapping = EngineConfig.from_mapping(
        {"speculative_config": {"num_speculative_tokens": 3, "method": "mtp"}})
    assert text == mapping and text.key() == mapping.key()
    assert hash(text.key()) == hash(mapping.key())  # a dict inside explicit() is not hashable
    with pytest.raises(ConfigError, match="speculative_config: not a JSON object"):
        EngineConfig.from_mapping({"speculative_config": "mtp x3"})


def test_async_scheduling_with_the_ngram_drafter_is_refused_as_vllm_does() -> None:
    ngram = {"method": "ngram", "num_speculative_tokens": 3}
    with pytest.raises(ConfigError, match="^engine config: vLLM refuses async_scheduling"):
        EngineConfig.from_mapping({"async_scheduling": True, "speculative_config": ngram})
    # Left to vLLM (None) it just turns async scheduling off.
    assert EngineConfig.from_mapping({"speculative_config": ngram}).async_scheduling is None
